"""The rich rendering of what the commands answer for SGLang: a plan, a check, an inspect."""

from __future__ import annotations

from typing import Sequence

from rich.table import Table
from rich.text import Text

from mambaxfer_cli.engines.sglang.check import CORRUPTS, FAIL, FAILS, MISROUTES, REFUSED, RIGHT, CheckReport
from mambaxfer_cli.engines.sglang.entries import CONV, TEMPORAL
from mambaxfer_cli.engines.sglang.families import merged
from mambaxfer_cli.engines.sglang.kv import dsa_page_size
from mambaxfer_cli.engines.sglang.plan import SGLangPlan
from mambaxfer_cli.engines.sglang.release import NIXL
from mambaxfer_cli.render.console import columns_table, model_rows, tp_pairing
from mambaxfer_cli.render.report import Report, pairings_junit
from mambaxfer_cli.engines.sglang.writes import StateWrite

LINES_SHOWN = 20
FIELD_NAMES = {CONV: "conv", TEMPORAL: "temporal", **merged("FIELD_LABELS")}
OUTCOMES = {RIGHT: Text("✓ right", style="green"), CORRUPTS: Text("✗ corrupts", style="bold red"),
            MISROUTES: Text("✗ misroutes", style="bold red"), REFUSED: Text("✗ refuses", style="bold red"),
            FAILS: Text("✗ fails", style="bold red"),
            FAIL: Text("✗ WRONG", style="bold red")}


def _heading(plan: SGLangPlan) -> str:
    """The plan's first line, with the dtypes of the states it moves (a lightning model keeps no conv)."""
    spec, fields = plan.model, {entry.field for entry in plan.decode_entries}
    dtypes = (("conv", spec.conv_dtype), ("temporal", spec.ssm_dtype))
    return (f"{spec.name} · {spec.variant.value} [{spec.family}] · {plan.release.label} over "
            f"{backend_name(plan.backend)} · "
            f"{tp_pairing(plan.p_tp, plan.d_tp)} · "
            + ", ".join(f"{field} {dtype}" for field, dtype in dtypes if field in fields))


def entries_table(plan: SGLangPlan) -> Table:
    """Each field's entry: the bytes of one slot on a P rank and a D rank, and its layers."""
    table = columns_table("entries (one per state and layer; a request is one slot of each)",
                          [("state", "left"), ("layers", "right"), ("P item", "right"), ("D item", "right"),
                           ("TP-sliced axis (P → D)", "right")], no_wrap=True)
    for field in _fields(plan):
        p = [e for e in plan.prefill_entries if e.field == field]
        d = [e for e in plan.decode_entries if e.field == field]
        if not p:
            continue
        axis = "replicated" if p[0].replicated else f"{p[0].dim:,} → {d[0].dim:,}"
        groups = f" in {len(p[0].conv_shard_groups)} groups" if p[0].conv_shard_groups else ""
        table.add_row(FIELD_NAMES[field], str(len(p)), f"{p[0].item_len:,} B", f"{d[0].item_len:,} B",
                      axis + groups)
    return table


def _fields(plan: SGLangPlan) -> list[str]:
    """The entries' fields in SGLang's order: conv, temporal, then the replicated side states."""
    return list(dict.fromkeys(e.field for e in plan.prefill_entries))


def layer_ids_text(plan: SGLangPlan) -> Text:
    """The entries' layer ids as SGLang numbers them, runs of consecutive ids joined (a state on
    other layers than the first's after its name)."""
    ids = {f: _runs([e.layer_id for e in plan.prefill_entries if e.field == f]) for f in _fields(plan)}
    first = next(iter(ids.values()), "")
    said = "; ".join([first, *(f"{FIELD_NAMES[f]} {runs}" for f, runs in ids.items() if runs != first)])
    return Text(f"layer ids (MambaPool.get_state_layer_ids, the model's own): {said}", style="dim")


def _runs(ids: list[int]) -> str:
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)


def _spans(writes: Sequence[StateWrite]) -> str:
    total = sum(w.length for w in writes)
    return f"{len(writes)} · {total:,} B" if writes else "—"


def writes_table(plan: SGLangPlan, d_rank: int | None = None) -> Table:
    """Per D rank, P rank and state: what SGLang writes (writes · bytes, one layer) beside the
    exact writes, and the bytes of that D rank's item SGLang gets wrong."""
    wrong = {(o.field, o.d_rank): o.bad for o in plan.verdict.outcomes}
    table = columns_table("writes per layer (P pushes into D's slot): SGLang's and the exact ones",
                          [("D", "right"), ("P", "right"), ("state", "left"), ("SGLang", "right"), ("exact", "right"),
                           ("D item wrong", "right")], no_wrap=True)
    keys = sorted({(w.d_rank, w.p_rank, w.field) for w in (*plan.writes, *plan.exact)},
                  key=lambda k: (k[0], _fields(plan).index(k[2]), k[1]))
    for d, p, field in keys:
        if d_rank is not None and d != d_rank:
            continue
        theirs = [w for w in plan.writes if (w.d_rank, w.p_rank, w.field) == (d, p, field)]
        exact = [w for w in plan.exact if (w.d_rank, w.p_rank, w.field) == (d, p, field)]
        bad = wrong.get((field, d), 0)
        table.add_row(str(d), str(p), FIELD_NAMES[field], _spans(theirs), _spans(exact),
                      Text(f"{bad:,} B", style="red") if bad else Text("0", style="green"))
    return table


def mapping_lines(plan: SGLangPlan) -> list[Text]:
    if plan.p_tp == plan.d_tp:
        return []
    said = "; ".join(f"D{m.d_rank} ← P{','.join(map(str, m.target_ranks))}" for m in plan.mapping)
    out = [Text(f"rank mapping (_resolve_rank_mapping): {said}")]
    if plan.head_slices:
        heads = "; ".join(f"D{d} ← P{p} " + (f"head {s.src_start}" if s.count == 1 else
                                               f"heads {s.src_start}..{s.src_start + s.count - 1}")
                          for d, p, s in plan.head_slices)
        out.append(Text(f"attention KV head slices (compute_head_slice_params): {heads}"))
    return out


def backend_name(backend: str) -> str:
    """A transfer backend as its project writes it."""
    return "NIXL" if backend == NIXL else "Mooncake"


def render_plan(plan: SGLangPlan, d_rank: int | None = None) -> list:
    descriptors, right = plan.descriptors(), plan.verdict.right
    verdict = Text("\n".join(f"{'✓' if right else '✗'} {line}" for line in plan.verdict.lines()),
                   style="green" if right else "bold red")
    parts: list = [Text(_heading(plan), style="bold"), verdict, entries_table(plan), layer_ids_text(plan)]
    if plan.writes or plan.exact:
        parts.append(writes_table(plan, d_rank))
    parts += mapping_lines(plan)
    if plan.draft is not None:
        parts.append(draft_text(plan))
    if plan.dsa_entries:
        latent, index = plan.dsa_entries[0].item_len, plan.dsa_entries[-1].item_len
        parts.append(Text(f"attention (DSATokenToKVPool, alike on every rank): {len(plan.dsa_entries) // 2} MLA "
                          f"latent entries of {latent:,} B and as many DSA index-key entries of {index:,} B, an "
                          f"item a page of {dsa_page_size(plan.model) or 0:,} tokens; each writer sends "
                          f"its pages whole (send_kvcache, StateType.DSA)"))
    if plan.state_page:
        parts.append(Text(f"QSA states (QSATokenToKVPool, alike on every rank; layer ids its "
                          f"get_qsa_*_state_layer_ids): a request's key rings and RoPE ring are one item each, "
                          f"at its request row (QSA_PENDING); its compressed keys one item per page of "
                          f"{plan.state_page} tokens (QSA_COMPRESSED), counted here for one page; the elected "
                          f"writers send them whole (should_send_replicated_state)"))
    what = "NIXL write descriptors" if plan.backend == NIXL else "Mooncake transfer blocks (_transfer_data)"
    parts.append(Text(f"{len(descriptors):,} {what} per request (every layer), "
                      f"{sum(x.length for x in descriptors):,} B", style="dim"))
    return parts


def draft_text(plan: SGLangPlan) -> Text:
    """The draft's KV entries, which follow the target's KV on both sides."""
    d = plan.draft
    assert d is not None
    p, q = (d.side(plan.model, tp, 1) for tp in (plan.p_tp, plan.d_tp))
    ids = ", ".join(str(d.band + i) for i in range(d.layers))
    how = "whole pages" if plan.p_tp == plan.d_tp else "head slices, token by token, as the target's"
    return Text(f"draft ({d.algorithm}, {d.source}): {2 * d.layers} KV entries after the target's KV, K then V "
                f"of layer id {ids}; per token P {p.heads} and D {q.heads} head(s) of {p.head_bytes} B "
                f"({p.token_bytes:,} and {q.token_bytes:,} B a layer); moved as {how}")


def check_table(report: CheckReport) -> Table:
    """Per pairing, what SGLang does and the bytes it gets wrong (mambaxfer's exact plan: the footer)."""
    table = columns_table(f"mambaxfer check: {report.release} over {backend_name(report.backend)}",
                          [("model", "left"), ("pairing", "left"), ("SGLang", "left"), ("state", "left"),
                           ("wrong bytes", "right")], no_wrap=True)
    for shown, r in model_rows(table, report.results, lambda r: r.model):
        wrong = r.wrong() if r.outcome == CORRUPTS else 0   # bytes that land wrong, not what a failed request would
        bad = dict.fromkeys(o.field for o in r.sglang if r.wrong(o.field)) if wrong else {}
        fields = "+".join(FIELD_NAMES[f] for f in bad)
        table.add_row(shown, r.pairing, OUTCOMES[r.outcome], fields, f"{wrong:,}" if wrong else "")
    return table


def check_footer(report: CheckReport) -> Text:
    counts = [f"{report.count(RIGHT)} right"]
    for outcome, word in ((CORRUPTS, "corrupted"), (MISROUTES, "misrouted"), (REFUSED, "refused"),
                          (FAILS, "failed")):
        if report.count(outcome):
            counts.append(f"{report.count(outcome)} {word} by {report.release}")
    n = len(report.results)
    exact = (f"mambaxfer's exact plan WRONG on {report.count(FAIL)}" if report.count(FAIL)
             else "mambaxfer's exact plan right on every one")
    return Text(f"{n} pairing{'' if n == 1 else 's'} checked byte by byte in {report.seconds:.2f} s: "
                f"{', '.join(counts)}; {exact}", style="bold green" if report.ok else "bold red")


def render_check(report: CheckReport) -> list:
    parts: list = [check_table(report)]
    bad = [r for r in report.results if r.outcome != RIGHT]
    parts += [Text("✗ " + "\n  ".join(r.plan.verdict.lines()), style="red") for r in bad[:LINES_SHOWN]]
    if len(bad) > LINES_SHOWN:
        parts.append(Text(f"… and {len(bad) - LINES_SHOWN} more (all of them in --format json)", style="red"))
    parts += [Text(f"– {line}", style="yellow") for line in report.unchecked]
    drafted = {r.model: r.plan.draft for r in report.results if r.plan.draft}
    parts += [Text(f"{name}: with its draft's KV ({d.algorithm}, {d.source}): K then V of layer id "
                   f"{', '.join(str(d.band + i) for i in range(d.layers))} after the target's, proven as the "
                   f"state", style="dim") for name, d in drafted.items()]
    parts.append(check_footer(report))
    return parts


def check_junit(report: CheckReport) -> str:
    """A pairing SGLang does not move right is a failure carrying its verdict."""
    return pairings_junit(f"mambaxfer check {report.release}", report.results, report.seconds, lambda r: (
        f"mambaxfer.check.sglang.{r.model}", f"{r.pairing} {report.backend}",
        None if r.outcome == RIGHT else (r.plan.verdict.sentence(), "\n".join(r.plan.verdict.lines())), None, None))


def render_both(vllm, sglang: CheckReport) -> list:
    """One row per model and pairing either engine was checked on: what each does with it."""
    from mambaxfer_cli.proof.verdicts import CORRUPTS as VLLM_CORRUPTS
    from mambaxfer_cli.proof.verdicts import REFUSES, RIGHT as VLLM_RIGHT

    vllm_does = {VLLM_RIGHT: OUTCOMES[RIGHT], VLLM_CORRUPTS: OUTCOMES[CORRUPTS], REFUSES: OUTCOMES[REFUSED]}
    rows: dict[tuple[str, int, int], list] = {}
    for r in vllm.results:
        if r.verdict != "skip":
            rows.setdefault((r.model, r.p_tp, r.d_tp), [None, None])[0] = r
    for s in sglang.results:
        rows.setdefault((s.model, s.plan.p_tp, s.plan.d_tp), [None, None])[1] = s
    table = columns_table(f"mambaxfer check: {vllm.releases} and {sglang.release}",
                          [("model", "left"), ("pairing", "left"), (vllm.releases, "left"), (sglang.release, "left"),
                           ("SGLang wrong B", "right")], no_wrap=True)
    not_checked = Text("– not checked", style="yellow")
    for shown, ((_, p_tp, d_tp), (v, s)) in model_rows(table, rows.items(), lambda row: row[0][0]):
        left = vllm_does[v.vllm_does] if v is not None and v.vllm_does in vllm_does else not_checked
        right = OUTCOMES[s.outcome] if s is not None else not_checked
        wrong = s.wrong() if s is not None and s.outcome == CORRUPTS else 0
        table.add_row(shown, tp_pairing(p_tp, d_tp), left, right, f"{wrong:,}" if wrong else "")
    parts: list = [table]
    lines = [r.deployment_line() for r in vllm.results if r.verdict in ("fail", "refused")]
    lines += [s.plan.verdict.sentence() for s in sglang.results if s.outcome != RIGHT]
    parts += [Text(f"✗ {line}", style="red") for line in lines[:LINES_SHOWN]]
    if len(lines) > LINES_SHOWN:
        parts.append(Text(f"… and {len(lines) - LINES_SHOWN} more (all of them in --format json)", style="red"))
    parts += [Text(f"– {line}", style="yellow") for line in (*vllm.unchecked, *sglang.unchecked)]
    n = len(rows)
    v_right = sum(1 for r in vllm.results if r.vllm_does == VLLM_RIGHT)
    ok = vllm.ok and sglang.ok and all(e.results or not e.unchecked for e in (vllm, sglang))
    parts.append(Text(f"{n} pairing{'' if n == 1 else 's'}: {vllm.releases} moves {v_right} of "
                      f"{sum(1 for r in vllm.results if r.verdict != 'skip')} right, {sglang.release} "
                      f"{sglang.count(RIGHT)} of {len(sglang.results)}", style="bold green" if ok else "bold red"))
    return parts


def render_models(report: Report) -> list:
    """The presets SGLang serves (its srt/models/ file) and mambaxfer answers for; why not the rest."""
    document = report.document
    table = columns_table(f"mambaxfer models: SGLang {document['release']}",
                          [("preset", "left"), ("SGLang's model file", "left"), ("mambaxfer answers", "left")],
                          no_wrap=True)
    for row in document["models"]:
        table.add_row(row["name"], row["sglang_file"] or "– none",
                      Text("✓ yes", style="green") if row["answered"] else Text("✗ no", style="red"))
    parts: list = [table]
    parts += [Text(f"– {row['name']}: {row['why']}", style="yellow") for row in document["models"] if row["why"]]
    unread = ", ".join(f"{u['label']} ({u['file']}, {u['config_class']})" for u in document["state_not_read"])
    parts.append(Text(f"SGLang {document['release']} also serves, with a recurrent state that configs/hybrid_arch.py "
                      f"mambaish_config finds and mambaxfer does not model: {unread}", style="dim"))
    return parts
