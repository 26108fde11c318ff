"""The plan an execute run performs: planned here with small engines, or read from a
``mambaxfer plan --output`` document, which must be exactly what the planner makes again."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from mambaxfer_cli.execute.difference import comparable, first_difference, shown_value
from mambaxfer_cli.readers.documents import parse_json, parse_yaml, read_text
from mambaxfer_cli.errors import UserError, reworded
from mambaxfer_cli.engines.vllm.kv_groups import KVGrouping, model_grouping
from mambaxfer_cli.limits import MAX_DIM, MAX_KV_GROUPS, MAX_LAYERS, at_most, check_bounds, within
from mambaxfer_cli.planning.model import ATTENTION, ModelSpec, Variant
from mambaxfer_cli.engines.vllm.drafts import page_ratio
from mambaxfer_cli.engines.vllm.geometry import EngineFlags
from mambaxfer_cli.engines.vllm.plan import SCHEMA, Plan, PlanOptions, build_plan

MIN_BLOCKS = 4


def default_blocks(spec: ModelSpec, request_blocks: int, ratio: int = 1) -> int:
    """Twice what the request needs, so that pages outside the request exist and are checked;
    ``ratio``: how many more blocks the attention groups take on the side of smaller blocks."""
    groups = model_grouping(spec).groups
    need = sum(request_blocks * (ratio if kind == "attention" else 1) for kind in groups)
    return max(MIN_BLOCKS, 2 * need)


def plan_to_execute(spec: ModelSpec, p_tp: int, d_tp: int, *, semantics: str, coalesce: bool,
                    blocks: int | None, request_blocks: int, seed: int,
                    engine: EngineFlags = EngineFlags()) -> Plan:
    """A plan with small engines (``blocks`` logical blocks each) of vLLM's geometry for ``engine``'s flags."""
    if request_blocks < 1:
        raise UserError("--request-blocks must be >= 1")
    probe = PlanOptions(semantics=semantics, prefill=engine, decode=engine)
    sizes = build_plan(spec, p_tp, d_tp, probe)      # the geometry: block sizes and blocks per logical
    b_p, b_d = sizes.prefill.geometry.block_size, sizes.decode.geometry.block_size
    ratio = max(1, -(-b_d // b_p))
    if blocks is None:
        blocks = default_blocks(spec, request_blocks, ratio)
    need = default_blocks(spec, request_blocks, ratio) // 2
    if blocks < need:
        raise UserError(f"--blocks {blocks}: a request of {request_blocks} blocks per KV-cache group needs at "
                        f"least {need} logical blocks")
    options = PlanOptions(
        semantics=semantics, coalesce=coalesce,
        prefill=replace(engine, num_blocks=blocks * sizes.prefill.geometry.blocks_per_logical),
        decode=replace(engine, num_blocks=blocks * sizes.decode.geometry.blocks_per_logical),
        request_blocks=request_blocks, seed=seed)
    return build_plan(spec, p_tp, d_tp, options)


def _read_document(path: Path) -> dict[str, Any]:
    text = read_text(path, f"--plan {path}")
    where = f"--plan {path}: not a readable plan document"
    yaml = path.suffix in (".yaml", ".yml") or str(path) == "-"     # standard input: either (JSON is YAML)
    document = parse_yaml(text, where) if yaml else parse_json(text, where)
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        found = document.get("schema") if isinstance(document, dict) else type(document).__name__
        raise UserError(f"--plan {path}: not a {SCHEMA} document (schema: {found!r}); write one with "
                        f"'mambaxfer plan ... --output FILE'")
    return document


def _blocks_text(groups: list[list[int]]) -> str:
    return ";".join(",".join(str(int(b)) for b in group) for group in groups)


def _prefix_with(spec: ModelSpec, ssm_layers: int, attention_layers: int) -> ModelSpec:
    """The model cut to the prefix of its layers that has these counts (as ``--layers`` cuts)."""
    ssm = attention = 0
    for n, kind in enumerate(spec.layers, start=1):
        ssm += kind == "ssm"
        attention += kind == "attention"
        if (ssm, attention) == (ssm_layers, attention_layers):
            return replace(spec, layers=spec.layers[:n])
    return spec   # the comparison below names the mismatch


def _document_model(model: dict[str, Any], model_arg: str | None, cli: dict[str, Any]) -> ModelSpec:
    """--model when given, else the preset or source the document names; the document's dtype and
    variant choices unless the command line gives its own."""
    from mambaxfer_cli.engines.vllm.startup import startup
    from mambaxfer_cli.readers.model_source import load_model, preset_names

    overrides = {"variant": Variant(model["variant"]), "conv_dtype": model["conv_dtype"],
                 "ssm_dtype": model["ssm_dtype"], "num_spec": int(model["num_spec"])}
    attention = model.get("attention")
    if attention:
        if not attention.get("mla"):    # an MLA model's latent comes from its config (checked below)
            overrides.update(kv_heads=int(attention["num_kv_heads"]), head_size=int(attention["head_size"]))
        if attention.get("dtype"):
            overrides["dtype"] = str(attention["dtype"])     # the model's dtype the plan was made with
    overrides.update({key: value for key, value in cli.items() if value is not None})
    if model_arg is None:
        model_arg = model["name"] if model["name"] in preset_names() else model["source"]
    spec = load_model(model_arg, **overrides, startup=startup())
    # A dtype the document fixed keeps the document's reason for it.
    origin = {**spec.origin, **{key: str(why) for key, why in dict(model.get("origin") or {}).items()
                                if key in spec.origin and cli.get(key) is None}}
    return replace(spec, origin=origin)


def _flags(geometry: dict[str, Any], ratio: int = 1) -> EngineFlags:
    """The engine that gives this geometry again (an explicit block size derives the same in every
    release); ``ratio``: what a drafter's pages raised the block by (``page_ratio``)."""
    from mambaxfer_cli.engines.vllm.gpu import gpu
    from mambaxfer_cli.engines.vllm.releases import release

    derived = bool(geometry.get("vllm_derived", True))
    gdn = geometry.get("gdn_prefill_backend")
    split = int(geometry.get("split_by_remote", 1))      # the engine's own blocks, before D's view splits them
    return EngineFlags(attention_backend=str(geometry["attention_backend"]),
                       block_size=int(geometry["block_size"]) // ratio, kv_cache_dtype=str(geometry["kv_cache_dtype"]),
                       prefix_caching=bool(geometry["prefix_caching"]), num_blocks=int(geometry["num_blocks"]) // split,
                       blocks_per_logical=None if derived else int(geometry["blocks_per_logical"]),
                       gdn_prefill_backend=None if gdn is None else str(gdn),
                       release=release(str(geometry["vllm_version"])), gpu=gpu(str(geometry["gpu"])))


def load_plan_file(path: Path, model_arg: str | None = None, cli_overrides: dict[str, Any] | None = None) -> Plan:
    """Rebuild the plan a document describes and require it to equal the document."""
    document = _read_document(path)
    try:
        model, dm = document["model"], document["descriptors"]
        p_tp, d_tp = int(document["prefill"]["tp"]), int(document["decode"]["tp"])
        if len(document["decode"]["ranks"]) != d_tp:
            raise UserError(f"--plan {path} holds {len(document['decode']['ranks'])} of {d_tp} D ranks (written "
                            f"with --d-rank?); execute needs every D rank: write the plan without --d-rank")
        spec = _document_model(model, model_arg, cli_overrides or {})
        # a drafter's attention layers, after the target's
        drafts = within(f"--plan {path}: model.draft_layers", int(model.get("draft_layers", 0)), 0, MAX_LAYERS,
                        "model's")
        if drafts:
            # a drafter's KV heads and head size, where not the target's
            heads, size = (within(f"--plan {path}: model.draft_attention", int(n), 1, MAX_DIM, "model's")
                           for n in model.get("draft_attention") or (1, 1))
            spec = replace(spec, layers=spec.layers + (ATTENTION,) * drafts, draft_layers=drafts,
                           draft_attention=(heads, size) if "draft_attention" in model else None)
        spec = _prefix_with(spec, int(model["ssm_layers"]), int(model["attention_layers"]))
        p_engine, d_engine = dm["prefill"], dm["decode"]
        check_bounds(p_tp=p_tp, d_tp=d_tp, p_num_blocks=int(p_engine["num_blocks"]),
                     d_num_blocks=int(d_engine["num_blocks"]),
                     p_blocks_per_logical=int(p_engine["blocks_per_logical"]),
                     d_blocks_per_logical=int(d_engine["blocks_per_logical"]),
                     kv_tensors=int(p_engine["tensors"]), ssm_tensors=int(p_engine["ssm_tensors"]))
        at_most(f"--plan {path}: KV-cache groups", len(dm["groups"]), MAX_KV_GROUPS, "model's")
        grouping = KVGrouping(tuple(dm["groups"]), int(p_engine["tensors"]), int(p_engine["ssm_tensors"]))
        derived = model_grouping(spec)
        if (derived.groups, derived.tensors, derived.ssm_tensors) == (grouping.groups, grouping.tensors,
                                                                      grouping.ssm_tensors):
            grouping = derived      # with each group's layers: the release's descriptor IDs need them
        coalesced = any("+" in seg["region"] for read in document["reads"] for seg in read["segments"])
        options = PlanOptions(
            semantics=document["semantics"], coalesce=coalesced,
            prefill=_flags(document["engines"]["prefill"], page_ratio(spec, p_tp)),
            decode=_flags(document["engines"]["decode"], page_ratio(spec, d_tp)),
            attention_streams=int(p_engine["attention_streams"]) // max(int(p_engine["tensors"]), 1),
            grouping=grouping, request_blocks=1,
            prefill_blocks=_blocks_text(dm["request"]["prefill_blocks"]),
            decode_blocks=_blocks_text(dm["request"]["decode_blocks"]))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
        raise UserError(f"--plan {path}: corrupt plan document (missing or malformed field: {exc})") from None
    try:
        plan = build_plan(spec, p_tp, d_tp, options)
    except UserError as exc:
        raise reworded(exc, f"--plan {path}: cannot be planned again for {spec.name}: {exc}") from None
    difference = first_difference(comparable(plan.to_dict()), comparable(document))
    if difference:
        where, mine, theirs = difference
        raise UserError(f"--plan {path} does not match the plan mambaxfer makes for {spec.name} "
                        f"({spec.source}): at {where} the file has {shown_value(theirs)}, planning again gives "
                        f"{shown_value(mine)}; the file was edited, or the model options differ")
    return plan
