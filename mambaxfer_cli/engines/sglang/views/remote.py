"""Rich views of ``execute --engine sglang`` on two hosts: the line each side prints first, and the
prefill side's table of what each P rank wrote (the decode side prints one host's table)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

from mambaxfer_cli.render.run_view import two_host_line
from mambaxfer_cli.render.console import columns_table, tp_pairing
from mambaxfer_cli.render.model_view import human_bytes

if TYPE_CHECKING:
    from mambaxfer_cli.engines.sglang.plan import SGLangPlan
    from mambaxfer_cli.execute.discovery import Discovery
    from mambaxfer_cli.engines.sglang.transfer.remote import SideOutcome


def side_line(plan: "SGLangPlan", discovery: "Discovery") -> str:
    """SGLang's two-host first line: D receives P's WRITEs."""
    return two_host_line(discovery, plan.p_tp, plan.d_tp, "receive the prefill side's WRITEs")


def written_table(outcome: "SideOutcome") -> Table:
    """The prefill side: each P rank's WRITEs into each D rank, timed, and that D rank's verdict."""
    plan = outcome.plan
    table = columns_table(f"prefill side of {plan.model.name}: {tp_pairing(plan.p_tp, plan.d_tp)}, "
                          f"{outcome.semantics} semantics", (
                              ("WRITE", "left"), ("bytes", "right"), ("descriptors", "right"), ("after merge", "right"),
                              ("time", "right"), ("GB/s", "right"), ("verdict", "left")))
    answers = {a.d_rank: a for a in outcome.answers}
    for p in outcome.prefill:
        for w in p.writes:
            answer = answers.get(w.d_rank)
            said = (Text("verified", style="green") if answer is not None and answer.ok
                    else Text(f"{answer.bad_bytes if answer else '?'} bad bytes", style="bold red"))
            table.add_row(f"P{p.p_rank} -> D{w.d_rank}", human_bytes(w.bytes), str(w.descriptors),
                          str(w.descriptors_merged), f"{w.time_s * 1e3:.2f} ms",
                          f"{w.bytes / w.time_s / 1e9 if w.time_s > 0 else 0.0:.2f}", said)
    table.caption = (f"{plan.release.label} WRITEs; geometry agreed with every decode rank; {outcome.rounds} "
                     f"rounds, each posted once the D ranks written into were poisoned, time = median; the verdict is "
                     f"the decode side's, which checked every byte")
    return table
