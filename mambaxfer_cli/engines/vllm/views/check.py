"""The rich rendering of vLLM's check: the summary table and each failure's explanation."""

from __future__ import annotations

from typing import Iterator

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from mambaxfer_cli.engines.vllm.reads import EXACT
from mambaxfer_cli.engines.vllm.proof.check import BOTH, CheckReport, PairingResult
from mambaxfer_cli.proof.verdicts import CORRUPTS, REFUSES, RIGHT
from mambaxfer_cli.render.console import columns_table, model_rows
from mambaxfer_cli.render.model_view import human_bytes
from mambaxfer_cli.render.report import pairings_junit

VERDICTS = {"pass": Text("✓ pass", style="green"), "fail": Text("✗ FAIL", style="bold red"),
            "refused": Text("✗ REFUSED", style="bold red"), "skip": Text("– skip", style="yellow")}
EXACT_PLAN = {"pass": Text("✓ right", style="green"), "fail": Text("✗ WRONG", style="bold red")}
VLLM_DOES = {RIGHT: Text("✓ right bytes", style="green"), CORRUPTS: Text("✗ corrupts", style="bold red"),
             REFUSES: Text("✗ refuses", style="bold red")}
LINES_SHOWN = 20


def deployment_table(report: CheckReport) -> Table:
    """BOTH: per pairing, mambaxfer's exact plan and what vLLM does."""
    table = columns_table(f"mambaxfer check: exact plan and {report.engines.describe()}", [
        ("model", "left"), ("pairing", "left"), ("bytes", "right"), ("mambaxfer", "left"), (report.releases, "left")],
        no_wrap=True)
    for model, pairing, r in _rows_by_model(table, report):
        if r.verdict == "skip":
            table.add_row(model, pairing, "", VERDICTS["skip"], VERDICTS["skip"])
            continue
        exact, does = r.exact_verdict, r.vllm_does
        assert exact is not None and does is not None, "a pairing checked under both semantics has both answers"
        table.add_row(model, pairing, human_bytes(r.bytes), EXACT_PLAN[exact], VLLM_DOES[does])
    return table


def _rows_by_model(table: Table, report: CheckReport) -> Iterator[tuple[str, str, PairingResult]]:
    """Each result with the model named on its first row only and a section between models; the
    pairing says when the plan was coalesced."""
    for model, r in model_rows(table, report.results, lambda r: r.model):
        yield model, r.pairing + (" coalesced" if r.coalesce else ""), r


def summary_table(report: CheckReport) -> Table:
    if report.semantics == BOTH:
        return deployment_table(report)
    table = columns_table(f"mambaxfer check ({report.semantics} semantics) · {report.engines.describe()}", [
        ("model", "left"), ("pairing", "left"), ("tp_ratio", "right"), ("reads", "right"), ("segments", "right"),
        ("descriptors", "right"), ("bytes", "right"), ("time", "right"), ("verdict", "left")], no_wrap=True)
    table.columns[0].no_wrap = False     # a long model name wraps
    for model, pairing, r in _rows_by_model(table, report):
        ratio = "—" if r.tp_ratio is None else str(r.tp_ratio)
        if r.verdict == "skip":
            table.add_row(model, pairing, ratio, "", "", "", "", "", VERDICTS["skip"])
            continue
        table.add_row(model, pairing, ratio, str(r.reads), str(r.segments), f"{r.descriptors:,}",
                      human_bytes(r.bytes), f"{r.seconds:.2f} s", VERDICTS[r.verdict])
    return table


def footer(report: CheckReport) -> Text:
    said = (("pass", "passed"), ("fail", "FAILED"), ("refused", f"REFUSED by {report.releases}"), ("skip", "skipped"))
    counts = [f"{report.count(verdict)} {words}" for verdict, words in said
              if report.count(verdict) or verdict == "pass"]       # passes are said even when none
    style = "bold green" if report.ok else "bold red"
    n = len(report.results)
    return Text(f"{n} pairing{'' if n == 1 else 's'} checked byte by byte in {report.seconds:.2f} s: "
                f"{', '.join(counts)}", style=style)


def failure_panel(result: PairingResult) -> Panel:
    lines = result.explanation()
    body = [Text(lines[0], style="bold")] + [Text(line) for line in lines[1:]]
    return Panel(Group(*body), title=f"✗ {result.title}", title_align="left", border_style="red")


def deployment_lines(report: CheckReport, shown: int = LINES_SHOWN) -> list:
    """BOTH: one line per pairing that does not work, saying what vLLM does and the fix."""
    failed = [r for r in report.results if r.verdict in ("fail", "refused")]
    parts: list = [Text(f"✗ {r.deployment_line()}", style="red") for r in failed[:shown]]
    if len(failed) > shown:
        parts.append(Text(f"… and {len(failed) - shown} more (all of them in --format json or --junit)", style="red"))
    if failed:
        parts.append(Text("vLLM's first wrong byte of each: --semantics vllm; mambaxfer's plans alone: "
                          "--semantics exact", style="dim"))
    return parts


def render_report(report: CheckReport, failures_shown: int = 10) -> list:
    parts: list = [summary_table(report)]
    undrafted = sum("draft-layers" in r.warnings for r in report.results)
    if undrafted:     # a drafter whose layers are not planned: its bytes are in no check (plan says why)
        parts.append(Text(f"warning: draft-layers: the draft's layers are not in the {undrafted} pairing"
                          f"{'s' * (undrafted > 1)} checked (mambaxfer plans the target's layers only; "
                          f"'mambaxfer plan' says why)", style="yellow"))
    skipped = [Text(f"– {r.title}: {r.reason}", style="yellow") for r in report.results if r.verdict == "skip"]
    unchecked = [Text(f"– {line}", style="yellow") for line in report.unchecked]
    if report.semantics == BOTH:
        return [*parts, *deployment_lines(report), *unchecked, *skipped, footer(report)]
    failed = [r for r in report.results if r.verdict in ("fail", "refused")]
    parts.extend(failure_panel(r) for r in failed[:failures_shown])
    if len(failed) > failures_shown:
        parts.append(Text(f"… and {len(failed) - failures_shown} more failing pairings "
                          f"(all of them in --format json or --junit)", style="red"))
    parts += skipped + unchecked
    refused_elsewhere = [r for r in report.results if r.semantics == EXACT and r.vllm and not r.vllm["accepts"]]
    if refused_elsewhere:
        shown = ", ".join(f"{r.model} {r.pairing}" for r in refused_elsewhere[:6])
        more = f" and {len(refused_elsewhere) - 6} more" if len(refused_elsewhere) > 6 else ""
        parts.append(Text(f"warning: {report.releases} would refuse {shown}{more} at handshake (mambaxfer's exact "
                          f"transfer handles them; --semantics vllm reports them as refused)", style="yellow"))
    parts.append(footer(report))
    return parts


def junit_xml(report: CheckReport) -> str:
    """A failure carries the explanation."""
    return pairings_junit("mambaxfer check", report.results, report.seconds, _junit_case)


def _junit_case(r: PairingResult) -> tuple:
    case = (f"mambaxfer.check.{r.model}", f"{r.pairing} {r.semantics}" + (" coalesced" if r.coalesce else ""))
    if r.verdict in ("fail", "refused"):
        lines = r.explanation(limit=1000)
        return *case, (lines[0] if lines else "check failed", "\n".join(lines)), None, None
    if r.verdict == "skip":
        return *case, None, r.reason, None
    return *case, None, None, (f"{r.reads} reads, {r.segments} segments, {r.descriptors} descriptor pairs, "
                               f"{r.bytes} bytes copied, "
                               f"{r.simulation.bytes_verified if r.simulation else 0} bytes verified"
                               + (f"; {r.deployment_line()}" if r.vllm_does else ""))
