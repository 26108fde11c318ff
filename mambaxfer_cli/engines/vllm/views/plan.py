"""The rich rendering of a plan: header, layouts, reads, page diagrams, descriptor IDs, warnings."""

from __future__ import annotations

from typing import Sequence

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from mambaxfer_cli.engines.vllm.descriptors import DescriptorRead
from mambaxfer_cli.engines.vllm.handshake import NOT_CHECKED, Verdict
from mambaxfer_cli.engines.vllm.kv_groups import PLE, describe
from mambaxfer_cli.render.console import columns_table, tp_pairing
from mambaxfer_cli.planning.model import SSM
from mambaxfer_cli.engines.vllm.plan import Plan
from mambaxfer_cli.engines.vllm.startup import refused_when
from mambaxfer_cli.planning.reads import Misread, Read, exact_reads, misreads
from mambaxfer_cli.render.id_runs import compact
from mambaxfer_cli.render.model_view import REGION_STYLES, human_bytes, layout_table, model_summary
from mambaxfer_cli.engines.vllm.views.model import geometry_line

P_COLOURS = ("blue", "dark_orange", "green4", "magenta", "cyan4", "red3", "gold3", "purple")
DIAGRAM_WIDTH = 80
MIN_PIECE = 7
# What `plan --show` adds to the brief form (verdict, both engines, reads summary, warnings).
SECTIONS = ("layouts", "reads", "diagram", "ids", "notes")
SUMMARY_READS = 8


def _p_style(p_rank: int) -> str:
    return f"bold white on {P_COLOURS[p_rank % len(P_COLOURS)]}"


def refused_text(verdict: Verdict, tail: str = "", releases: str = "") -> Text:
    """``<release> refuses this pairing at handshake: <its refusals>`` (or at start-up), then ``; tail``
    if given; ``releases``: how to name the release, by default as the verdict does."""
    said = " ".join(r.message for r in verdict.refusals)
    when = refused_when(verdict.refusals[0].code) if verdict.refusals else "at handshake"
    text = Text(f"{releases or verdict.releases} refuses this pairing {when}: ", style="bold red")
    text.append(f"{said.rstrip('.')}; {tail}" if tail else said, style="red")
    return text


def verdict_line(plan: Plan) -> Text:
    """The release's verdict, first: accepted (and whether it reads the same bytes), or refused and the fix."""
    v, releases = plan.verdict, plan.releases
    if v.accepts:
        wrong = [w for w in plan.warnings if w.code in ("vllm-differs", "vllm-replicated-groups")]
        if wrong:
            text = Text(f"{releases} accepts this pairing but its reads corrupt the state (see the warnings)",
                        style="bold red")
        elif plan.prefill.kernel_tokens != plan.decode.kernel_tokens and plan.prefill.has_attention:
            text = Text(f"{releases} accepts this pairing; it reads P's {plan.prefill.kernel_tokens}-token kernel "
                        f"blocks into sub-blocks of D's {plan.decode.kernel_tokens}-token ones and then puts "
                        f"their tokens in D's order", style="bold green")
        else:
            text = Text(f"{releases} accepts this pairing and issues the same reads", style="bold green")
        if v.needs_remote_num_tokens:
            text.append("\nthe proxy must forward remote_num_tokens (blocks pair from the last token)",
                        style="bold yellow")
        if v.fix_words():
            text.append(f"\nfix: {v.fix_words()}", style="bold yellow")
        return text
    text = refused_text(v, releases=releases)
    if v.fix_words():
        env = f"VLLM_KV_CACHE_LAYOUT={v.suggested_layout} " if v.suggested_layout else ""
        size = f" --block-size {v.suggested_block_size}" if v.suggested_block_size else ""
        text.append(f"\nfix: {v.fix_words()} ({env}vllm serve …{size})", style="bold yellow")
    return text


def not_compared() -> Text:
    """What vLLM's handshake does not compare (the same for every plan: shown on request)."""
    return Text("vLLM does not compare " + ", ".join(NOT_CHECKED) + " at handshake: a mismatch there "
                "corrupts the state silently (mambaxfer preflight compares them)", style="dim")


def header(plan: Plan) -> Panel:
    ratio = "none (neither TP divides the other)" if plan.tp_ratio is None else str(plan.tp_ratio)
    d = plan.descriptors
    flags = plan.decode.geometry
    # A model without attention layers still has F whole-block streams in each list (docs/reference.md, descriptor IDs),
    # but none of them is attention's.
    streams = (f"{d.decode.attention_streams} attention streams" if plan.model.attention_layers else
               f"{d.decode.attention_streams} whole-block streams (no attention layers)")
    if d.decode.regions:    # vLLM's own regions: every view of a block row (GLM-5-Next, Qwen4Exp)
        streams = f"{d.decode.regions} NIXL regions (SSM states, compressed keys, attention pages, rings)"
    lines = [
        model_summary(plan.model),
        plan.engines.describe(),
        f"{tp_pairing(plan.prefill.tp, plan.decode.tp)} · tp_ratio {ratio} · semantics {plan.semantics}",
        f"KV-cache groups {describe(plan.grouping)} · {d.decode.tensors} tensors "
        f"({d.decode.ssm_tensors} with SSM layers) · {streams}",
        geometry_line("P", plan.prefill),
        geometry_line("D", plan.decode),
        f"prefix caching {'on' if flags.prefix_caching else 'off'} · KV cache {flags.kv_cache_dtype}"
        + (f" ({plan.decode.kv_dtype})" if plan.decode.kv_dtype else ""),
    ]
    return Panel("\n".join(lines), title="mambaxfer plan", title_align="left", expand=False)


def _misread_notes(plan: Plan) -> dict[tuple[int, int, int], list[Misread]]:
    notes: dict[tuple[int, int, int], list[Misread]] = {}
    for m in misreads(plan.reads, plan.prefill.ranks, plan.decode.ranks):
        for read in (r for r in plan.reads if (r.d_rank, r.p_rank) == (m.d_rank, m.p_rank)):
            for seg in read.segments:
                if seg.local_offset <= m.local_offset < seg.local_offset + seg.size:
                    notes.setdefault((read.d_rank, read.p_rank, seg.local_offset), []).append(m)
    return notes


def _exact_source(exact: Sequence[Read], d_rank: int, local_offset: int) -> str:
    """Where the exact plan reads the D byte at ``local_offset`` from."""
    for read in exact:
        for seg in read.segments:
            if read.d_rank == d_rank and seg.local_offset <= local_offset < seg.local_offset + seg.size:
                return f"P{read.p_rank}@{seg.remote_offset + local_offset - seg.local_offset}"
    return "?"


def reads_table(plan: Plan, d_rank: int | None) -> Table:
    notes = _misread_notes(plan)
    exact = exact_reads(plan.prefill.ranks, plan.decode.ranks) if notes else ()
    table = columns_table("Reads (bytes within one block's page)", [
        ("D", "right"), ("P", "right"), ("region", "left"), ("remote offset", "right"), ("local offset", "right"),
        ("size", "right"), ("check", "left")])
    shown = [r for r in plan.reads if d_rank is None or r.d_rank == d_rank]
    for i, read in enumerate(shown):
        last_of_rank = i == len(shown) - 1 or shown[i + 1].d_rank != read.d_rank
        for j, seg in enumerate(read.segments):
            bad = notes.get((read.d_rank, read.p_rank, seg.local_offset), [])
            verdict = (Text("✗ gets " + ", ".join(f"{m.got} as {m.wanted}" for m in bad)
                            + f"; exact: {_exact_source(exact, read.d_rank, bad[0].local_offset)}",
                            style="bold red")
                       if bad else Text("✓", style="green"))
            table.add_row(str(read.d_rank) if j == 0 else "", Text(f"P{read.p_rank}", style=_p_style(read.p_rank)),
                          Text(seg.region, style=REGION_STYLES.get(seg.region, "")),
                          str(seg.remote_offset), str(seg.local_offset), str(seg.size), verdict,
                          end_section=last_of_rank and j == len(read.segments) - 1)
    return table


def page_diagram(plan: Plan, d_rank: int, width: int = DIAGRAM_WIDTH) -> Text:
    """One bar per D rank: its page, each piece coloured by source P rank, labelled by region; the
    bar is ``width`` columns, on several lines when its pieces' labels need more."""
    layout = plan.decode.ranks[d_rank]
    segments = sorted(((seg, read.p_rank) for read in plan.reads if read.d_rank == d_rank
                       for seg in read.segments), key=lambda item: item[0].local_offset)
    bad_offsets = {m.local_offset for m in misreads([r for r in plan.reads if r.d_rank == d_rank],
                                                    plan.prefill.ranks, plan.decode.ranks)}
    total = layout.state_bytes
    labels = [("✗" if any(seg.local_offset <= off < seg.local_offset + seg.size for off in bad_offsets) else "")
              + f"{seg.region}·P{p_rank}" for seg, p_rank in segments]
    piece = max([MIN_PIECE, *(len(label) + 1 for label in labels)])
    if piece * len(segments) <= width:
        # Every piece gets room for its label; the rest of the bar is shared out by size.
        spare = width - piece * len(segments)
        widths = [piece + int(seg.size / total * spare) for seg, _ in segments]
    else:
        widths = [piece] * len(segments)    # too many pieces for one line: equal pieces, several lines
    head = f"D{d_rank} "
    bar, used = Text(head), 0
    for (_, p_rank), label, w in zip(segments, labels, widths):
        if used and used + w > width:
            bar.append("\n" + " " * len(head))
            used = 0
        bar.append(label[:w].center(w), style=_p_style(p_rank))
        used += w
    bar.append(f"  {human_bytes(total)}")
    bar.no_wrap = True
    return bar


def diagrams(plan: Plan, d_rank: int | None, width: int = DIAGRAM_WIDTH + 20) -> Panel:
    """The page diagrams in a panel at most ``width`` columns wide."""
    ranks = [d_rank] if d_rank is not None else range(plan.decode.tp)
    label = len(f"D{plan.decode.tp - 1} ") + len(f"  {human_bytes(max(r.state_bytes for r in plan.decode.ranks))}")
    bar = max(MIN_PIECE, min(DIAGRAM_WIDTH, width - 4 - label))
    sources = sorted({r.p_rank for r in plan.reads if d_rank is None or r.d_rank == d_rank})
    legend = Text("source: ")
    for p in sources:
        legend.append(f" P{p} ", style=_p_style(p))
        legend.append(" ")
    legend.append("  (widths roughly to scale, small regions widened; ✗ = wrong bytes)")
    return Panel(Group(*[page_diagram(plan, d, bar) for d in ranks], legend),
                 title="Where every byte of each D page comes from", title_align="left", expand=False)


def _group_id_lines(read: DescriptorRead, ids: Sequence[int], plan: Plan, side: str) -> list[tuple[str, str]]:
    """Split a read's IDs by KV-cache group; within a group, one line per block (stride L)."""
    request = plan.descriptors.request
    blocks = request.decode_blocks if side == "local" else request.prefill_blocks
    out, at = [], 0
    for g, (kind, logical, count) in enumerate(zip(plan.descriptors.groups, blocks, read.group_counts)):
        if kind not in (SSM, PLE):
            if not count:
                continue
            streams = plan.descriptors.streams_of(g)
            width = count // streams       # one row per stream
            rows = [ids[at + s * width:at + (s + 1) * width] for s in range(streams)]
        elif count or kind == SSM:
            rows = [ids[at + b:at + count:len(logical)] for b in range(len(logical))]   # one row per block
        else:
            continue
        at += count
        out.append((f"{g} {kind}", "\n".join(compact(row, limit=3) for row in rows[:4])
                    + (f"\n… {len(rows) - 4} more" if len(rows) > 4 else "")))
    return out


def descriptor_table(plan: Plan, d_rank: int | None) -> Table:
    """One row block per distinct read; D ranks whose IDs are identical share a row block."""
    d = plan.descriptors
    table = columns_table("Descriptor IDs for the request (one READ per source P rank)", [
        ("D", "right"), ("P", "right"), ("local list", "left"), ("k", "right"), ("group", "left"),
        ("local IDs", "left"), ("remote IDs", "left")])
    shared: dict[tuple, list[DescriptorRead]] = {}
    for read in d.reads:
        if d_rank is None or read.d_rank == d_rank:
            key = (read.p_rank, read.local_list, read.local_ids.tobytes(), read.remote_ids.tobytes())
            shared.setdefault(key, []).append(read)
    for reads in shared.values():
        read = reads[0]
        d_ranks = ",".join(str(r.d_rank) for r in reads)
        local = _group_id_lines(read, read.local_ids, plan, "local")
        remote = _group_id_lines(read, read.remote_ids, plan, "remote")
        for j, ((group, loc), (_, rem)) in enumerate(zip(local, remote)):
            head = (d_ranks, f"P{read.p_rank}", read.local_list, str(read.local.k)) if j == 0 else ("",) * 4
            table.add_row(*head, group, loc, rem, end_section=j == len(local) - 1)
    request = d.request
    table.caption = (f"request: P blocks {[b.tolist() for b in request.prefill_blocks]}, "
                     f"D blocks {[b.tolist() for b in request.decode_blocks]}; "
                     f"SSM IDs = F·N·n + (tensor·k + region)·L + block, attention IDs = (stream·N + kernel "
                     f"block)·n + piece (n pieces per kernel block: 1 unless the block sizes differ)"
                     + ("; streams are vLLM's NIXL regions (F of them: SSM states, compressed keys, attention "
                        "pages, rings), each attention-kind group over those it covers"
                        + ("; a PLE group's one ID per block follows the SSM ones" if PLE in d.groups else "")
                        if d.decode.regions else ""))
    return table


def coalesce_note(plan: Plan) -> list[Text]:
    before = sum(len(r.segments) for r in plan.uncoalesced_reads)
    after = sum(len(r.segments) for r in plan.reads)
    if before == after and plan.reads == plan.uncoalesced_reads:
        return []
    eng = plan.descriptors.decode
    ssm_blocks = sum(len(b) for kind, b in zip(plan.descriptors.groups, plan.descriptors.request.decode_blocks)
                     if kind == SSM)
    saved = (before - after) * eng.ssm_tensors * ssm_blocks
    return [Text(f"--coalesce: {before} segments → {after}; saves {saved} descriptors for this request "
                 f"({before - after} per layer and block)", style="bold cyan")]


def warnings_panel(plan: Plan) -> list[Panel]:
    body = "\n".join(f"[bold]{w.code}[/]: {w.message}" for w in plan.warnings)
    return [Panel(body, title="Warnings", title_align="left", border_style="yellow", expand=False)] if body else []


def reads_summary(plan: Plan, d_rank: int | None) -> list:
    """The reads in a few lines: how many, how many bytes, and per read its source and regions."""
    notes = _misread_notes(plan)
    shown = [r for r in plan.reads if d_rank is None or r.d_rank == d_rank]
    segments = sum(len(r.segments) for r in shown)
    moved = sum(seg.size for r in shown for seg in r.segments)
    sources = sorted({r.p_rank for r in shown})
    d_ranks = sorted({r.d_rank for r in shown})
    lines = [Text(f"Reads: {len(shown)} (one per D rank and source P rank), {segments} segments, "
                  f"{moved} bytes of each block's page from {len(sources)} P rank"
                  f"{'' if len(sources) == 1 else 's'} to {len(d_ranks)} D rank{'' if len(d_ranks) == 1 else 's'}",
                  style="bold")]
    for read in shown[:SUMMARY_READS]:
        line = Text(f"  D{read.d_rank} ← ")
        line.append(f"P{read.p_rank}", style=_p_style(read.p_rank))
        line.append(": " + ", ".join(f"{seg.region} {seg.size} B" for seg in read.segments))
        bad = [m for seg in read.segments for m in notes.get((read.d_rank, read.p_rank, seg.local_offset), [])]
        if bad:
            line.append("  ✗ gets " + ", ".join(f"{m.got} as {m.wanted}" for m in bad), style="bold red")
        lines.append(line)
    if len(shown) > SUMMARY_READS:
        lines.append(Text(f"  … and {len(shown) - SUMMARY_READS} more reads (--show reads)"))
    return lines


def render_plan(plan: Plan, d_rank: int | None = None, show: Sequence[str] = SECTIONS,
                width: int = DIAGRAM_WIDTH + 20) -> list:
    """The plan's parts: the verdict, both engines and the reads in brief, warnings; and the
    ``show`` sections (``SECTIONS``) in full."""
    from mambaxfer_cli.render.console import together

    parts: list = [verdict_line(plan), header(plan)]
    if "layouts" in show:
        parts += together([layout_table(f"Prefill (P) TP {plan.prefill.tp}", plan.prefill.ranks),
                           layout_table(f"Decode (D) TP {plan.decode.tp}",
                                        [r for r in plan.decode.ranks if d_rank is None or r.rank == d_rank])],
                          "layouts")
    parts += [reads_table(plan, d_rank)] if "reads" in show else reads_summary(plan, d_rank)
    if "diagram" in show:
        parts.append(diagrams(plan, d_rank, width))
    parts += coalesce_note(plan)
    if "ids" in show:
        parts.append(descriptor_table(plan, d_rank))
    parts += warnings_panel(plan)
    if "notes" in show:
        parts.append(not_compared())
    hidden = [name for name in SECTIONS if name not in show]
    if hidden:
        parts.append(Text(f"more: --show {','.join(hidden)} (or --show all)", style="dim"))
    return parts
