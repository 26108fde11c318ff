"""``execute --engine sglang --role prefill|decode``: one side of SGLang's transfer on this host,
the other side's command on another (``engines/sglang/transfer/remote.py``), and each side's report."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from mambaxfer_cli.render.report import AsIs, Report
from mambaxfer_cli.exits import EXIT_OK, EXIT_WRONG

if TYPE_CHECKING:
    from mambaxfer_cli.cli.options import RunArgs
    from mambaxfer_cli.engines.sglang.plan import SGLangPlan
    from mambaxfer_cli.execute.discovery import Discovery
    from mambaxfer_cli.engines.sglang.transfer.remote import SideOutcome


def run_side(planned: SGLangPlan, chosen: str, discovery: Discovery, device: str, gpus: int,
             run_args: RunArgs) -> Report:
    """This side's ranks, to their end; its report (exit 0, 1 with bad bytes, 2 refused, 3 failed)."""
    from mambaxfer_cli.cli.outcome import one_line_when_the_run_fails
    from mambaxfer_cli.engines.sglang.transfer.remote import execute_side, settings_for
    from mambaxfer_cli.render.run_view import ProgressView
    from mambaxfer_cli.engines.sglang.views.execute import title
    from mambaxfer_cli.engines.sglang.views.remote import side_line

    settings = settings_for(planned, chosen, discovery, device, gpus, run_args.iters)
    typer.echo(side_line(planned, discovery), err=True)
    view_title = f"{title(planned, chosen, device)}, {discovery.role} side"
    with one_line_when_the_run_fails(), ProgressView(view_title) as view:
        outcome = execute_side(planned, chosen, settings, run_args.timeout, view.update)
    return SideReport(outcome)


class SideReport(Report):
    """The decode side: one host's table, its bad bytes; the prefill side: what it wrote, and what
    each D rank answered (its exit code is theirs)."""

    def __init__(self, outcome: SideOutcome) -> None:
        super().__init__(outcome.to_dict(), EXIT_OK if outcome.verified else EXIT_WRONG)
        self.outcome = outcome

    def render(self, width: int) -> list[Any]:
        from mambaxfer_cli.engines.sglang.views.execute import bad_bytes_report, result_table
        from mambaxfer_cli.engines.sglang.views.remote import written_table

        if self.outcome.role == "prefill":
            return [AsIs(written_table(self.outcome))]
        table = result_table(self.outcome)
        table.title = f"{table.title}, decode side"
        report = bad_bytes_report(self.outcome)
        return [table] if report is None else [table, AsIs(report)]
