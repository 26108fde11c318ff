"""What plan, inspect and check do under ``--engine sglang``: the options SGLang's rules read, the
ones they refuse (vLLM's flags), and the reports."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from mambaxfer_cli.cli.options import EngineArgs, ModelArgs, OutputArgs, RequestArgs, parse_tp_list
from mambaxfer_cli.cli.params import changed_flags
from mambaxfer_cli.engines.sglang.release import BACKENDS, DEFAULT_BACKEND, SGLANG_0_5_23
from mambaxfer_cli.engines.sglang.served import ARCHITECTURES, STATE_NOT_READ, startup
from mambaxfer_cli.engines.sglang.shapes import family_rule, sglang_model, state_shape
from mambaxfer_cli.render.report import AsIs, Report, Viewed
from mambaxfer_cli.errors import UserError

if TYPE_CHECKING:
    from mambaxfer_cli.engines import ServingEngine

NAME = "sglang"
# ModelArgs' options that SGLang's rules set themselves (its dtype variables, no speculative rows).
_SET_BY_SGLANG = ("conv_dtype", "ssm_dtype", "num_spec")


def backend(engines: EngineArgs, said: bool = True) -> str:
    """--transfer-backend, after refusing the vLLM flags given with --engine sglang, whatever their
    value (``said``; beside vLLM, those set other than their default: the rest are vLLM's)."""
    given = changed_flags(engines, skip=("engine", "transfer_backend", "speculative_algorithm",
                                                  "speculative_draft_model_path"), said=said)
    if given:
        raise UserError(f"{', '.join(given)}: vLLM's option{'s' if len(given) > 1 else ''}; --engine sglang does "
                        f"not read {'them' if len(given) > 1 else 'it'} (SGLang's: --transfer-backend, "
                        f"--speculative-algorithm, --draft-model)")
    chosen = (engines.transfer_backend or DEFAULT_BACKEND).strip().lower()
    if chosen not in BACKENDS:
        raise UserError(f"--transfer-backend: '{engines.transfer_backend}' is not one of {', '.join(BACKENDS)}")
    return chosen


def request_unused(request: RequestArgs | None, said: bool = True) -> None:
    """Refuse the request options (vLLM's blocks and reads) with --engine sglang, whatever their
    value (``said``: as ``backend``)."""
    given = changed_flags(request, said=said) if request is not None else []
    if given:
        raise UserError(f"{', '.join(given)}: {'these apply' if len(given) > 1 else 'it applies'} to vLLM's block "
                        f"reads; SGLang moves one slot per request (--engine sglang)")


def load(model: ModelArgs, name: str | None = None):
    """The model, refusing the overrides SGLang decides itself; read with SGLang's start-up
    refusals in place of vLLM's."""
    given = [flag for flag in changed_flags(model, skip=("model", "all_presets", "variant", "kv_heads", "head_size"))
             if flag.lstrip("-").replace("-", "_") in _SET_BY_SGLANG]
    if given:
        raise UserError(f"{', '.join(given)}: SGLang sets its state dtypes and conv rows itself "
                        f"(SGLANG_MAMBA_CONV_DTYPE, SGLANG_MAMBA_SSM_DTYPE, the config's mamba_ssm_dtype); "
                        f"--engine sglang does not take {'them' if len(given) > 1 else 'it'}")
    if model.indexer_kv_dtype is not None:
        raise UserError("--indexer-kv-dtype: vLLM's option (its --attention-config indexer_kv_dtype); "
                        "--engine sglang does not read it")
    return model.load(name, startup=startup(SGLANG_0_5_23.version))


class PlanReport(Report):
    def __init__(self, plan, d_rank: int | None) -> None:
        document = {"schema": "mambaxfer.sglang-plan/v1", **plan.to_dict(),
                    "descriptors": [vars(d) for d in plan.descriptors()]}
        if d_rank is not None:
            if not 0 <= d_rank < plan.d_tp:
                raise UserError(f"--d-rank {d_rank}: D has ranks 0 to {plan.d_tp - 1}")
            for key in ("writes", "exact"):
                document[key] = [w for w in document[key] if w["d_rank"] == d_rank]
            document["descriptors"] = [x for x in document["descriptors"] if x["d_rank"] == d_rank]
        super().__init__(document)
        self.plan, self.d_rank = plan, d_rank

    def render(self, width: int) -> list:
        from mambaxfer_cli.engines.sglang.views.answers import render_plan

        return render_plan(self.plan, self.d_rank)

    def written(self, path) -> list:
        return [self.plan.verdict.sentence(), f"wrote {path}: {len(self.document['writes'])} writes per layer, "
                                              f"{len(self.document['descriptors'])} descriptors"]


def plan_report(model: ModelArgs, engines: EngineArgs, request: RequestArgs, p_tp: int, d_tp: int,
                d_rank: int | None, show: str | None) -> Report:
    from mambaxfer_cli.engines.sglang.plan import plan

    chosen = backend(engines)
    request_unused(request)
    if show is not None:
        raise UserError("--show: the sections of vLLM's plan; --engine sglang shows its entries, writes and "
                        "rank mapping always")
    spec = load(model)
    return PlanReport(plan(spec, p_tp, d_tp, backend=chosen, draft=draft(spec, engines)), d_rank)


def draft(spec, engines: EngineArgs):
    """The draft SGLang's speculative flags build for ``spec`` (None: none)."""
    from mambaxfer_cli.engines.sglang.drafts import draft_for

    return draft_for(spec, engines.speculative_algorithm, engines.speculative_draft_model_path)


def check_report(model: ModelArgs, engines: EngineArgs, request: RequestArgs, pairs: str | None,
                 max_tp: int | None, said: bool = True, beside: bool = False) -> Viewed:
    """``check --engine sglang``; ``beside`` (vLLM's): a model SGLang does not serve is left out with
    a line saying why, as --all-presets leaves one out, so that vLLM's column stays."""
    from mambaxfer_cli.engines.sglang.check import run, targets
    from mambaxfer_cli.limits import MAX_TP, within
    from mambaxfer_cli.proof.verdicts import ALL_PRESETS_MAX_TP, parse_pairs
    from mambaxfer_cli.render.run_view import progress
    from mambaxfer_cli.engines.sglang.views.answers import check_junit, render_check

    chosen = backend(engines, said)
    request_unused(request, said)
    if pairs is not None and max_tp is not None:
        raise UserError("give either --pairs or --max-tp, not both")
    if max_tp is not None:
        within("--max-tp", max_tp, 1, MAX_TP, "deployment's TP size")
    listed = [(p.p_tp, p.d_tp) for p in parse_pairs(pairs)] if pairs is not None else None
    every = model.all_presets or beside
    specs, refused = [], []
    for name in model.names():
        try:
            specs.append(load(model, name))
        except UserError as exc:    # SGLang's start-up refusal of a config as read
            if not every:
                raise
            refused.append(str(exc))
    work, left_out = targets(specs, listed, max_tp or ALL_PRESETS_MAX_TP, every=every)
    drafted = []
    for target in work:
        try:
            drafted.append(replace(target, draft=draft(target.model, engines)))
        except UserError as exc:    # no draft SGLang builds for this model
            if not every:
                raise
            refused.append(str(exc))
    work, left_out = drafted, [*refused, *left_out]
    with progress() as (on_start, on_result):
        # The progress bar reads a result's model and pairing, which SGLang's results have too.
        report = run(work, chosen, on_start=on_start, on_result=cast(Any, on_result), left_out=left_out)
    return Viewed(report, render_check, check_junit)


def inspect_report(model: ModelArgs, engines: EngineArgs, tp: str) -> Report:
    from mambaxfer_cli.engines.sglang.entries import beside_entries, transfer_entries
    from mambaxfer_cli.engines.sglang.writes import check_side

    sizes = parse_tp_list(tp)
    backend(engines)
    spec = sglang_model(load(model))
    drafted = draft(spec, engines)
    sides = {tp: check_side(spec, tp) for tp in sizes}
    shapes = {tp: state_shape(spec, tp) for tp in sizes}
    # Each replicated field's first entry (side and QSA states), as the state's are its first layer's.
    first: dict[str, Any] = {}
    for entry in beside_entries(spec):
        first.setdefault(entry.field, entry)
    document = {"schema": "mambaxfer.sglang-inspect/v1", "engine": NAME, "release": SGLANG_0_5_23.version,
                "model": spec.to_dict(),
                "layouts": {str(tp): [r.to_dict() for r in side.layouts()] for tp, side in sides.items()},
                "entries": {str(tp): [e.to_dict() for e in transfer_entries(
                    shapes[tp], spec.conv_dtype, spec.ssm_dtype, spec.ssm_layer_ids[:1]) + tuple(first.values())]
                    for tp in sizes},
                "draft": drafted and drafted.to_dict() | {"token_bytes": {str(tp): drafted.side(spec, tp, 1).token_bytes
                                                                          for tp in sizes}}}
    return InspectReport(document, spec, sides, shapes)


class InspectReport(Report):
    def __init__(self, document: dict, spec, sides: dict, shapes: dict) -> None:
        super().__init__(document)
        self.spec, self.sides, self.shapes = spec, sides, shapes

    def render(self, width: int) -> list:
        from mambaxfer_cli.render.console import together
        from mambaxfer_cli.render.model_view import layout_table, model_summary

        tables = together([layout_table(f"TP {tp}", side.layouts()) for tp, side in self.sides.items()], "layouts")
        parts: list = [AsIs(model_summary(self.spec)), AsIs("SGLang 0.5.23: one slot per request, per layer")]
        for tp, table in zip(self.sides, tables):
            shape = self.shapes[tp]
            conv = " × ".join(map(str, shape.conv))
            temporal = " × ".join(map(str, shape.temporal))
            groups = f", sharded in groups {list(shape.conv_shard_groups)}" if shape.conv_shard_groups else ""
            parts += [table, AsIs(f"SGLang at TP {tp}: conv state {conv} ({self.spec.conv_dtype}){groups}; "
                                  f"temporal {temporal} ({self.spec.ssm_dtype})")]
        sides = [e for e in self.document["entries"][str(next(iter(self.sides)))] if e["dim"] == 0]
        if sides:
            said = "; ".join(f"{e['field']} {e['item_len']:,} B (layer {e['layer_id']})" for e in sides)
            parts.append(AsIs(f"SGLang's replicated states, whole on every rank (the first entry of each): {said}"))
        if (d := self.document["draft"]) is not None:
            per_tp = ", ".join(f"{n:,} B at TP {tp}" for tp, n in d["token_bytes"].items())
            parts.append(AsIs(f"SGLang's draft KV ({d['algorithm']}, {d['source']}): K then V of layer id "
                              f"{', '.join(str(d['band'] + i) for i in range(d['layers']))} after the target's; "
                              f"per token and layer {per_tp}"))
        return parts


def side_by_side(other: ServingEngine, model: ModelArgs, engines: EngineArgs, request: RequestArgs,
                 output: OutputArgs, pairs: str | None, max_tp: int | None) -> Report:
    """``check --engine vllm,sglang``: both engines on the same models and pairings, in one table;
    ``other`` (vLLM) checks as plain ``check`` runs it."""
    ours = EngineArgs(engine=NAME, transfer_backend=engines.transfer_backend)   # vLLM's flags are vLLM's
    backend(ours, said=False)
    # First: a pairing or option SGLang refuses is said before vLLM checks anything; a model it does
    # not serve is a line of its column, and vLLM's column stays.
    theirs = check_report(model, ours, request, pairs, max_tp, said=False, beside=True)
    # vLLM's check hears it runs beside SGLang: a model it refuses is a line of its column
    vllm = other.check(model, replace(engines, transfer_backend=None), request, output, pairs, max_tp)
    return BothReport(cast(Viewed, vllm).report, theirs.report)


class BothReport(Report):
    """vLLM's and SGLang's checks of the same pairings, side by side."""

    def __init__(self, vllm, sglang) -> None:
        # SGLang serving none of the models asked about fails the check (--all-presets leaves some out).
        ok = vllm.ok and sglang.ok and all(e.results or not e.unchecked for e in (vllm, sglang))
        super().__init__({"schema": "mambaxfer.check-engines/v1", "engines": ["vllm", "sglang"],
                          "ok": ok, "vllm": vllm.to_dict(), "sglang": sglang.to_dict()},
                         exit_code=0 if ok else 1)
        self.vllm, self.sglang = vllm, sglang

    def render(self, width: int) -> list:
        from mambaxfer_cli.engines.sglang.views.answers import render_both

        return render_both(self.vllm, self.sglang)


def models_report() -> Report:
    """``models --engine sglang``: each preset, the srt/models/ file SGLang serves it with and whether
    mambaxfer answers for it (else why not); what SGLang serves with a state mambaxfer does not read."""
    from mambaxfer_cli.planning.startup import architecture_names
    from mambaxfer_cli.readers.model_source import load_model, preset_names
    from mambaxfer_cli.engines.sglang.views.answers import render_models

    rows = []
    for name in preset_names():
        spec = load_model(name, startup=startup(SGLANG_0_5_23.version))
        archs = architecture_names(spec.hf_config)
        try:
            family_rule(spec, SGLANG_0_5_23)
            why = None
        except UserError as exc:
            why = str(exc).removeprefix(f"{name}: ").split("; mambaxfer answers")[0]
        rows.append({"name": name, "source": spec.source, "family": spec.family, "architectures": list(archs),
                     "sglang_file": next((ARCHITECTURES[a] for a in archs if a in ARCHITECTURES), None),
                     "answered": why is None, "why": why})
    unread = [{"architecture": arch, "label": label, "file": ARCHITECTURES[arch], "config_class": config,
               "found_by": branch} for arch, (label, config, branch) in STATE_NOT_READ.items()]
    return Viewed(Report({"schema": "mambaxfer.sglang-models/v1", "engine": NAME, "release": SGLANG_0_5_23.version,
                          "models": rows, "state_not_read": unread}), render_models)
