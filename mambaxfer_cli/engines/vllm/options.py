"""What vLLM reads of the option groups: both engines built from ``EngineArgs``, the plan's options
from ``RequestArgs``, and the help of its own flags."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, TypeVar

import typer

from mambaxfer_cli.errors import UserError, reworded
from mambaxfer_cli.limits import check_bounds, within

if TYPE_CHECKING:
    from mambaxfer_cli.cli.options import EngineArgs, ModelArgs, RequestArgs
    from mambaxfer_cli.planning.model import ModelSpec
    from mambaxfer_cli.engines.vllm.engine import Engines
    from mambaxfer_cli.engines.vllm.plan import PlanOptions
    from mambaxfer_cli.engines.vllm.release import Release

T = TypeVar("T")
_BLOCKS = "{} engine's number of kernel blocks (N; default {}, in check {})."


def option_help() -> dict[str, str]:
    """The help of the flags that state vLLM's facts (its releases, their defaults)."""
    from mambaxfer_cli.engines.vllm import releases
    from mambaxfer_cli.engines.vllm.geometry import DEFAULT_NUM_BLOCKS
    from mambaxfer_cli.proof import CHECK_NUM_BLOCKS

    return {"vllm_version": f"The vLLM release the engines run: {releases.choices()} (default: the vLLM installed "
                            "here, else the newest mambaxfer knows).",
            "block_size": "Both engines' --block-size in tokens (default: none given, so the release's: "
                          f"{releases.block_size_defaults()}; vLLM raises it for hybrids).",
            "p_num_blocks": _BLOCKS.format("P", DEFAULT_NUM_BLOCKS, CHECK_NUM_BLOCKS["prefill"]),
            "d_num_blocks": _BLOCKS.format("D", DEFAULT_NUM_BLOCKS, CHECK_NUM_BLOCKS["decode"])}


def model_names(model: ModelArgs) -> list[str]:
    """--model, or with --all-presets the presets some vLLM release serves (those of a family only
    another engine serves left out, as --engine sglang leaves out those SGLang does not serve)."""
    from mambaxfer_cli.engines.vllm.startup import served_anywhere
    from mambaxfer_cli.planning.startup import architecture_names
    from mambaxfer_cli.readers.model_source import preset_file

    names = model.names()
    archs = {n: architecture_names(preset_file(n)["config"]) for n in names} if model.all_presets else {}
    return [n for n in names if not archs.get(n) or served_anywhere(archs[n])]


def build(args: EngineArgs, num_blocks: dict[str, int] | None = None) -> Engines:
    """Both engines, built once: each side's own value, else the one both share, else the default;
    ``num_blocks``: the sides' number of blocks when not given (check's)."""
    from mambaxfer_cli.cli.options import refuse_value
    from mambaxfer_cli.engines.vllm.engine import Engines
    from mambaxfer_cli.engines.vllm.geometry import MAX_BLOCK_SIZE, EngineFlags
    from mambaxfer_cli.engines.vllm.gpu import DEFAULT_GPU, gdn_prefill_backend, gpu
    from mambaxfer_cli.engines.vllm.kv_layout import ENV_LAYOUTS

    check_bounds(p_num_blocks=args.p_num_blocks, d_num_blocks=args.d_num_blocks,
                 p_blocks_per_logical=args.p_blocks_per_logical, d_blocks_per_logical=args.d_blocks_per_logical)
    for flag, value in (("--block-size", args.block_size), ("--p-block-size", args.p_block_size),
                        ("--d-block-size", args.d_block_size)):
        if value is not None:
            within(flag, value, 1, MAX_BLOCK_SIZE, "engine's block")
    if args.transfer_backend is not None:
        raise UserError("--transfer-backend: SGLang's option (with --engine sglang); vLLM's NIXL connector has "
                        "one transfer backend")
    refuse_sglang_drafts(args)
    device = DEFAULT_GPU if args.gpu is None else _for_option("--gpu", gpu, args.gpu)
    shared = _release("--vllm-version", args.vllm_version) if args.vllm_version is not None else None

    def own(prefix: str, name: str) -> Any:
        value = getattr(args, f"{prefix}_{name}")
        return getattr(args, name) if value is None else value

    def side(prefix: str, role: str) -> EngineFlags:
        version = getattr(args, f"{prefix}_vllm_version")
        chosen = (_release(f"--{prefix}-vllm-version", version) if version is not None
                  else shared or _release_when_unnamed())
        blocks = getattr(args, f"{prefix}_num_blocks")
        given = dict(**{name: own(prefix, name) for name in ("attention_backend", "block_size", "kv_cache_dtype")},
                     prefix_caching=own(prefix, "enable_prefix_caching"),
                     gdn_prefill_backend=args.gdn_prefill_backend,
                     num_blocks=(num_blocks or {}).get(role) if blocks is None else blocks,
                     blocks_per_logical=getattr(args, f"{prefix}_blocks_per_logical"))
        return EngineFlags(release=chosen, gpu=device, **{k: v for k, v in given.items() if v is not None})

    if args.gdn_prefill_backend is not None:
        _for_option("--gdn-prefill-backend", gdn_prefill_backend, device, None, args.gdn_prefill_backend)
    if args.kv_cache_layout is not None and args.kv_cache_layout not in ENV_LAYOUTS:
        raise refuse_value("kv_cache_layout", args.kv_cache_layout, ENV_LAYOUTS)
    return Engines(side("p", "prefill"), side("d", "decode"), kv_cache_layout=args.kv_cache_layout)


def drafted(specs: list[ModelSpec], model: ModelArgs, args: EngineArgs, engines: Engines) -> list[ModelSpec]:
    """The models as engines started with --speculative-config hold them (``drafts.with_drafts``,
    by D's release: the rule is the same in every release mambaxfer knows)."""
    from mambaxfer_cli.engines.vllm.drafts import speculative_config, with_drafts

    speculative = speculative_config(args.speculative_config)
    return [with_drafts(spec, speculative, engines.decode.release, model.num_spec) for spec in specs]


def plan_options(request: RequestArgs, engines: Engines, semantics: str | None = None,
                 speculative: str | None = None) -> PlanOptions:
    """PlanOptions from the request and both engines (``build``); ``speculative``: --speculative-config."""
    from mambaxfer_cli.engines.vllm.drafts import drafter_of, drafts, speculative_config
    from mambaxfer_cli.engines.vllm.kv_groups import parse_grouping
    from mambaxfer_cli.engines.vllm.plan import PlanOptions

    check_bounds(attention_streams=request.attention_streams, kv_tensors=request.kv_tensors,
                 ssm_tensors=request.ssm_tensors, request_blocks=request.request_blocks, seed=request.seed)
    if request.kv_groups is None and (request.kv_tensors is not None or request.ssm_tensors is not None):
        raise UserError("--kv-tensors and --ssm-tensors only apply with --kv-groups")
    grouping = (parse_grouping(request.kv_groups, request.kv_tensors, request.ssm_tensors)
                if request.kv_groups is not None else None)
    config = speculative_config(speculative) or {} if speculative is not None else {}
    return PlanOptions(
        semantics=semantics or request.reads(), coalesce=request.coalesce, prefill=engines.prefill,
        decode=engines.decode, attention_streams=request.attention_streams, grouping=grouping,
        request_blocks=request.request_blocks, prefill_blocks=request.prefill_blocks,
        decode_blocks=request.decode_blocks, seed=request.seed, kv_cache_layout=engines.kv_cache_layout,
        drafted=None if speculative is None else drafts(config), drafter=drafter_of(config))


_said: set[str] = set()


def _release_when_unnamed() -> Release:
    """The release of an engine given no --vllm-version: the vLLM installed here, else the newest
    mambaxfer knows; what to say about an installed release it does not know, said once."""
    from mambaxfer_cli.engines.vllm.installed import default_release

    found = default_release()
    if found.note and found.note not in _said:
        _said.add(found.note)
        typer.echo(f"note: {found.note}", err=True)
    return found.release


def _for_option(prefix: str, call: Callable[..., T], *args: Any) -> T:
    """``call(*args)``, its UserError said after the option that gave it (``prefix``)."""
    try:
        return call(*args)
    except UserError as exc:
        raise reworded(exc, f"{prefix}: {exc}") from None


def _release(flag: str, name: str) -> Release:
    from mambaxfer_cli.engines.vllm.releases import release

    return _for_option(f"{flag} {name}", release, name)


def refuse_sglang_drafts(args: EngineArgs) -> None:
    for flag, given in (("--speculative-algorithm", args.speculative_algorithm),
                        ("--draft-model", args.speculative_draft_model_path)):
        if given is not None:
            raise UserError(f"{flag}: SGLang's option (with --engine sglang); vLLM's is --speculative-config")
