"""Rich views of vLLM's execute run: its title and two-host line, the per-D-rank result table, and
where the first wrong bytes are."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group, JustifyMethod
from rich.table import Table
from rich.text import Text

from mambaxfer_cli.engines.vllm.kv_groups import RING
from mambaxfer_cli.render.console import columns_table, tp_pairing
from mambaxfer_cli.render.model_view import human_bytes
from mambaxfer_cli.render.run_view import checked, run_totals

if TYPE_CHECKING:
    from mambaxfer_cli.engines.vllm.transfer.run import Outcome
    from mambaxfer_cli.execute.discovery import Discovery
    from mambaxfer_cli.engines.vllm.plan import Plan


def moved(semantics: str) -> str:
    """What a run moved: vLLM's own reads (its default) or mambaxfer's plan."""
    return ("vLLM's reads (--semantics vllm)" if semantics == "vllm" else
            "mambaxfer's exact reads (--semantics exact)")


def title(plan: "Plan", device: str, discovery: "Discovery | None" = None) -> str:
    memory = "VRAM" if device == "cuda" else "DRAM"
    side = f", {discovery.role} side" if discovery is not None else ""
    return (f"execute {plan.model.name}: {tp_pairing(plan.prefill.tp, plan.decode.tp)}, "
            f"{moved(plan.semantics)}, {plan.engines.describe()}, {memory} over UCX{side}")


def refused_line(plan: "Plan") -> Text | None:
    """Where vLLM refuses the pairing: its refusal, and what the run's reads are then."""
    from mambaxfer_cli.engines.vllm.views.plan import refused_text

    if plan.verdict.accepts:
        return None
    moved = "the reads vLLM's rules would post" if plan.semantics == "vllm" else "mambaxfer's exact reads"
    return refused_text(plan.verdict, f"a deployment moves nothing; the run moved {moved}")


def undrafted_line(plan: "Plan") -> Text | None:
    """Where the plan leaves speculative decoding's draft layers out: the run did not move them."""
    if not any(w.code == "draft-layers" for w in plan.warnings):
        return None
    return Text("warning: draft-layers: the run moved the target's layers only, not the draft's (mambaxfer "
                "does not plan them; 'mambaxfer plan' says why)", style="yellow")


def served_table(outcome: "Outcome") -> Table:
    """The prefill side of a two-host run: what each P rank served, to whom."""
    plan = outcome.plan
    table = columns_table(f"prefill side of {plan.model.name}: {tp_pairing(plan.prefill.tp, plan.decode.tp)}, "
                          f"{plan.semantics} semantics", (("P rank", "right"), ("served", "left"), ("bytes", "right"),
                                                         ("READ notifications", "right"), ("fill", "right")))
    for p_rank, result in sorted(outcome.prefill.items()):
        served = outcome.served(p_rank)
        table.add_row(str(p_rank), ", ".join(f"D{c['d_rank']}" for c in served),
                      human_bytes(sum(c["bytes"] for c in served)),
                      str(sum(c["notifications"] for c in served)), f"{result.fill_s * 1e3:.1f} ms")
    table.caption = ("geometry agreed with every decode rank; each one's last READ notified, then memory "
                     "freed; the decode side verifies the bytes")
    return table


def result_table(outcome: "Outcome") -> Table:
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("D rank", "right"), ("from P", "left"), ("lists", "left"), ("bytes", "right"), ("descriptors", "right"),
        ("after merge", "right"), ("time", "right"), ("GB/s", "right"), ("verdict", "left"))
    # Whole pages, within bytes and descriptors: Qwen4Exp's PLE, and the indexer's ring and compressed keys
    ple = any(d.ple_descriptors for d in outcome.decode)
    indexer = any(d.indexer_descriptors for d in outcome.decode)
    columns = (*columns[:5], *((("PLE", "right"),) if ple else ()), *((("indexer", "right"),) if indexer else ()),
               *columns[5:])
    table = columns_table(title(outcome.plan, outcome.settings.device, outcome.settings.discovery), columns)
    for d in outcome.decode:
        cells = [str(d.d_rank), ", ".join(f"P{p}" for p in d.sources), ", ".join(d.local_lists),
                 human_bytes(d.bytes), str(d.descriptors_posted)]
        pages = ((ple, d.ple_descriptors, d.ple_bytes), (indexer, d.indexer_descriptors, d.indexer_bytes))
        for shown, count, size in pages:
            if shown:
                cells.append(f"{count} page read{'' if count == 1 else 's'}, {human_bytes(size)}")
        table.add_row(
            *cells, str(d.descriptors_merged), f"{d.time_s * 1e3:.2f} ms", f"{d.gb_per_s:.2f}",
            checked(d.ok, f"{d.check.wrong_bytes} wrong bytes"))
    longest = max((d.time_s for d in outcome.decode), default=0.0)
    request = outcome.plan.descriptors.request.decode_blocks
    # a drafter's group of smaller blocks holds more; a tail ring one a request
    counts = sorted({len(b) for kind, b in zip(outcome.plan.descriptors.groups, request) if kind != RING})
    table.caption = (f"request: {' or '.join(map(str, counts)) or 0} logical blocks in each of {len(request)} "
                     f"KV-cache groups; {outcome.settings.iters} iteration(s), "
                     + run_totals(outcome.total_bytes, longest, outcome.phases, "D ranks together moved",
                                  "D page checked"))
    return table


def corruption_report(outcome: "Outcome") -> Group | None:
    """For each D rank that failed: wrong bytes per region and the first wrong byte, located."""
    lines = []
    for d, check in ((d, d.check) for d in outcome.decode if not d.check.ok):
        regions = ", ".join(f"{name} {count}" for name, count in check.wrong_by_region.items())
        lines.append(Text(f"D{d.d_rank}: {check.wrong_bytes} of {check.checked_bytes} bytes wrong "
                          f"({regions})", style="bold red"))
        lines.extend(Text(f"  {line}") for line in check.lines())
    return Group(*lines) if lines else None
