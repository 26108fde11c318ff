"""Rich views of ``execute --engine sglang`` (one host, or each side of two) and of ``bench --engine
sglang``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from mambaxfer_cli.render.console import columns_table, tp_pairing
from mambaxfer_cli.render.model_view import human_bytes
from mambaxfer_cli.render.run_view import checked, run_totals

if TYPE_CHECKING:
    from mambaxfer_cli.engines.sglang.plan import SGLangPlan
    from mambaxfer_cli.engines.sglang.transfer.remote import SideOutcome
    from mambaxfer_cli.engines.sglang.transfer.run import SlotOutcome


# An MLA model's attention buffers in the caption, by kv.py's field, each with its page's bytes.
BUFFERS = {"kv": "MLA latent", "index_k": "DSA index keys"}


def title(plan: "SGLangPlan", semantics: str, device: str) -> str:
    memory = "VRAM" if device == "cuda" else "DRAM"
    moved = ("SGLang's writes (--semantics sglang)" if semantics == "sglang" else
             "mambaxfer's exact writes (--semantics exact)")
    return (f"execute {plan.model.name}: {tp_pairing(plan.p_tp, plan.d_tp)}, {moved}, "
            f"{plan.release.label} WRITEs ({plan.backend.upper()}), {memory} over UCX")


def result_table(outcome: "SlotOutcome") -> Table:
    from mambaxfer_cli.engines.sglang.transfer.run import D_SLOT, P_SLOT

    table = columns_table(title(outcome.plan, outcome.semantics, outcome.settings.device), (
        ("D rank", "right"), ("from P", "left"), ("bytes", "right"), ("descriptors", "right"),
        ("after merge", "right"), ("time", "right"), ("GB/s", "right"), ("verdict", "left")))
    rows = outcome.to_dict()["decode"]     # each D rank's bytes, descriptors, time and rate
    for d, row in zip(outcome.decode, rows):
        table.add_row(
            str(d.d_rank), ", ".join(f"P{p}" for p, _ in outcome.into(d.d_rank)), human_bytes(row["bytes"]),
            str(row["descriptors"]), str(row["descriptors_merged"]), f"{row['time_s'] * 1e3:.2f} ms",
            f"{row['gb_per_s']:.2f}", checked(d.ok, f"{d.bad} bad bytes"))
    longest = max((row["time_s"] for row in rows), default=0.0)
    plan, kv = outcome.plan, outcome.attention
    entries = len(outcome.moved.decode_entries) if outcome.moved else len(plan.decode_entries)
    sides = sum(1 for e in plan.decode_entries if e.replicated)
    drafted = f" ({kv['draft_layers']} the draft's)" if kv and kv["draft_layers"] else ""
    held = "" if not kv else "K and V" if "k" in kv["buffers"] else " and ".join(
        f"{BUFFERS[f]} ({n:,} B)" for f, n in kv["buffers"].items())
    layers = f"{plan.verdict.ssm_layers} SSM layers" + (f", {sides} replicated items" if sides else "") + (
        f", {held} of {kv['layers']} attention layer{'s' if kv['layers'] != 1 else ''}"
        f"{drafted}: slot = page of "
        f"{kv['page_size']} tokens" if kv else "")
    table.caption = (f"request: P slot {P_SLOT} -> D slot {D_SLOT} of each of {entries} entries "
                     f"({layers}); P WRITEs, one descriptor per write and layer"
                     f"{', and per token where KV heads are sliced' if kv else ''}; "
                     f"{outcome.rounds} rounds, each with its own pattern and poison, "
                     + run_totals(outcome.total_bytes, longest, outcome.phases, "P ranks together wrote",
                                  "D entry checked each round"))
    return table


def bad_bytes_report(outcome: "SlotOutcome") -> Group | None:
    """Per D rank with bad bytes: per field wrong, missing, beyond, and the first bad byte; then
    the total beside check's prediction (SGLang's writes)."""
    lines = []
    for d in outcome.decode:
        if d.ok:
            continue
        fields = "; ".join(f"{f.field}: " + ", ".join(f"{n} {what}" for n, what in
                                                      ((f.wrong, "wrong"), (f.missing, "missing"),
                                                       (f.beyond, "beyond its item")) if n)
                           for f in d.fields if f.bad)
        lines.append(Text(f"D{d.d_rank}: {d.bad} bad bytes over {d.fields[0].layers} layers ({fields})",
                          style="bold red"))
        if d.first is not None:
            lines.append(Text(f"  first: {d.first.describe(d.d_rank)}"))
    if outcome.semantics == "sglang":
        same = "the same" if outcome.bad_bytes == outcome.predicted else "they differ"
        lines.append(Text(f"measured {outcome.bad_bytes:,} bad bytes for one request, all layers; check --engine "
                          f"sglang predicts {outcome.predicted:,}: {same}"))
    return Group(*lines) if lines else None


def bench_table(document: dict[str, Any]) -> Table:
    """``bench --engine sglang``: the planned WRITEs and the one-descriptor limit, side by side."""
    title_text = (f"{document['model']} {tp_pairing(document['p_tp'], document['d_tp'])}, SGLang "
                  f"{document['release']} WRITEs ({document['semantics']} writes), {document['device']}, "
                  f"{document['iters']} iters")
    table = columns_table(title_text, (
        ("variant", "left"), ("desc", "right"), ("kept", "right"), ("B/desc", "right"),
        ("bytes", "right"), ("median", "right"), ("GB/s", "right"), ("p99 GB/s", "right"), ("check", "left")),
        box=None, padding=(0, 1))
    for name, row in document["variants"].items():
        table.add_row(name, str(row["descriptors_posted"]), str(row["descriptors_kept"]),
                      human_bytes(row["bytes_per_descriptor"]), human_bytes(row["bytes"]),
                      f"{row['time_us']['median'] / 1e3:.2f} ms", f"{row['gb_per_s']['median']:.2f}",
                      f"{row['gb_per_s']['p99']:.2f}",
                      Text("ok", style="green") if row["verified"] else Text("WRONG", style="bold red"))
    table.caption = (f"one request: P slot -> D slot of {document['entries']} entries ({document['ssm_layers']} SSM "
                     f"layers); desc/kept: descriptors posted, and kept after NIXL's merge; planned: the plan's "
                     f"descriptors, one per write and layer; limit: one descriptor "
                     f"per P -> D pair, the same bytes; planned/limit {document['ratio']:.2f}; every byte of D "
                     f"checked after each")
    return table


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
            said = checked(answer is not None and answer.ok, f"{answer.bad_bytes if answer else '?'} bad bytes")
            table.add_row(f"P{p.p_rank} -> D{w.d_rank}", human_bytes(w.bytes), str(w.descriptors),
                          str(w.descriptors_merged), f"{w.time_s * 1e3:.2f} ms",
                          f"{w.bytes / w.time_s / 1e9 if w.time_s > 0 else 0.0:.2f}", said)
    table.caption = (f"{plan.release.label} WRITEs; geometry agreed with every decode rank; {outcome.rounds} "
                     f"rounds, each posted once the D ranks written into were poisoned, time = median; the verdict is "
                     f"the decode side's, which checked every byte")
    return table
