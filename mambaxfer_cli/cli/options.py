"""Options shared by several commands, and the builders that turn them into core values."""

from __future__ import annotations

import os
import stat
import tempfile
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from mambaxfer_cli.errors import UserError, clipped
from mambaxfer_cli.limits import MAX_TP, at_most, check_bounds, within
from mambaxfer_cli.engines import DEFAULT as DEFAULT_ENGINE
from mambaxfer_cli.engines import engine as serving_engine
from mambaxfer_cli.engines import described as described_engines
from mambaxfer_cli.engines.vllm import releases
from mambaxfer_cli.engines.vllm.geometry import DEFAULT_NUM_BLOCKS
from mambaxfer_cli.planning.model import ModelSpec, Variant
from mambaxfer_cli.planning.variants import names as variant_names
from mambaxfer_cli.proof import CHECK_NUM_BLOCKS


def _panel(name: str):
    def option(*names, **settings):
        return typer.Option(*names, rich_help_panel=name, **settings)
    option.__doc__ = f"typer.Option, listed under '{name}' in --help."
    return option


# Help groups options in these panels, the same in every command.
ModelOption, EngineOption, RequestOption, OutputOption = map(_panel, ("Model", "Engines", "Request", "Output"))


class Format(str, Enum):
    table = "table"
    json = "json"
    yaml = "yaml"


class Semantics(str, Enum):
    exact = "exact"
    vllm = "vllm"


class CheckSemantics(str, Enum):
    """What ``check`` proves: both (mambaxfer's exact plan and vLLM's reads), or one of them."""
    both = "both"
    exact = "exact"
    vllm = "vllm"


MODEL_HELP = ("A built-in preset (see 'mambaxfer models'), a config.json, a model directory, "
              "a YAML model file, or a Hugging Face repo id already in the local cache.")

ModelOpt = Annotated[str, ModelOption("--model", "-m", help=MODEL_HELP, show_default=False)]


def _variant(text: str | Variant) -> Variant:
    """``--variant``: a variant's name, in any case (``planning/variants/`` lists them)."""
    try:
        return Variant(str(text).strip().lower())
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not one of {', '.join(map(repr, variant_names()))}.") from None


VariantOpt = Annotated[Optional[Variant], ModelOption(
    "--variant", help="Override variant detection.", parser=_variant, metavar="<Variant>")]
ConvDtypeOpt = Annotated[Optional[str], ModelOption(
    "--conv-dtype", help="Conv state dtype (default: the model's torch_dtype).")]
SsmDtypeOpt = Annotated[Optional[str], ModelOption(
    "--ssm-dtype", help="Temporal (SSM) state dtype (default: the model's, else the conv dtype).")]
NumSpecOpt = Annotated[Optional[int], ModelOption(
    "--num-spec", help="Speculative tokens: extra conv rows for Mamba2 and GDN (default 0).")]
SemanticsOpt = Annotated[Semantics, RequestOption(
    "--semantics", help="exact: mambaxfer's unit-exact reads; vllm: what vLLM issues.",
    case_sensitive=False)]


def load(model: str, variant: Variant | None, conv_dtype: str | None, ssm_dtype: str | None,
         num_spec: int | None, kv_heads: int | None = None, head_size: int | None = None) -> ModelSpec:
    from mambaxfer_cli.readers.model_source import load_model

    check_bounds(num_spec=num_spec, kv_heads=kv_heads, head_size=head_size)
    return load_model(model, variant=variant, conv_dtype=conv_dtype, ssm_dtype=ssm_dtype,
                      num_spec=num_spec, kv_heads=kv_heads, head_size=head_size)


def parse_tp_list(text: str, flag: str = "--tp") -> list[int]:
    sizes = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = int(part)
        except ValueError:
            raise UserError(f"{flag}: '{part}' is not an integer; write e.g. {flag} 1,2,4,8") from None
        if value < 1:
            raise UserError(f"{flag}: TP sizes must be positive integers, got {value}")
        at_most(flag, value, MAX_TP, "deployment's TP size")
        sizes.append(value)
    if not sizes:
        raise UserError(f"{flag}: give at least one TP size, e.g. {flag} 1,2,4,8")
    return sizes


def stamped(document: dict) -> dict:
    """The document with the version that produced it, right after its schema name."""
    from mambaxfer_cli import __version__

    head = {key: document[key] for key in ("schema",) if key in document}
    return {**head, "producer": f"mambaxfer {__version__}", **document}


MAX_YAML_WIDTH = 1 << 30     # YAML's lines as long as their values: a document is never wrapped


def dump(document: dict, fmt: Format) -> str:
    if fmt is Format.yaml:
        import yaml

        return yaml.safe_dump(document, sort_keys=False, width=MAX_YAML_WIDTH)   # never folded
    import json

    return json.dumps(document, indent=2) + "\n"


def _target(path: Path, flag: str) -> tuple[Path, os.stat_result | None]:
    """Where ``path`` leads (symlinks followed) and what is there now, if anything."""
    try:
        target = Path(os.path.realpath(path))
        try:
            return target, os.stat(target)
        except FileNotFoundError:
            return target, None
    except OSError as exc:   # a name too long for the file system, a loop of symlinks, ...
        raise UserError(f"{flag} {clipped(str(path))}: {exc.strerror or exc}") from None


def check_writable(path: Path, flag: str = "--output") -> None:
    """Refuse before the work what write_output would refuse after it."""
    target, found = _target(path, flag)
    if found is not None and stat.S_ISDIR(found.st_mode):
        raise UserError(f"{flag} {path}: is a directory")
    if found is None and not target.parent.is_dir():
        raise UserError(f"{flag} {path}: directory {target.parent} does not exist")


def write_output(path: Path, text: str, flag: str = "--output") -> None:
    """Write ``--output``/``--junit`` as a user expects. A regular file (or a new path) gets the
    whole text or nothing: a temp file beside it, renamed over it, with the old file's mode (a new
    one: the umask's). A symlink is followed; a device or pipe is written through, never replaced."""
    check_writable(path, flag)
    target, found = _target(path, flag)
    data = text.encode()
    try:
        if found is not None and not stat.S_ISREG(found.st_mode):
            with open(target, "wb") as handle:
                handle.write(data)
            return
        _replace(target, data, stat.S_IMODE(found.st_mode) if found is not None else 0o666 & ~_umask())
    except OSError as exc:
        raise UserError(f"{flag} {path}: cannot write: {exc.strerror or exc}") from None


def _replace(target: Path, data: bytes, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name[:200]}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())   # a full disk shows here, not after the rename
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


PTpOpt = Annotated[int, EngineOption("--p-tp", help="Prefill (P) tensor-parallel size.", show_default=False)]
DTpOpt = Annotated[int, EngineOption("--d-tp", help="Decode (D) tensor-parallel size.", show_default=False)]
CoalesceOpt = Annotated[bool, RequestOption(
    "--coalesce/--no-coalesce", help="Merge segments adjacent on both sides into one descriptor.")]
PNumBlocksOpt = Annotated[Optional[int], EngineOption(
    "--p-num-blocks", help=f"P engine's number of kernel blocks (N; default {DEFAULT_NUM_BLOCKS}, in check "
                           f"{CHECK_NUM_BLOCKS['prefill']}).", show_default=False)]
DNumBlocksOpt = Annotated[Optional[int], EngineOption(
    "--d-num-blocks", help=f"D engine's number of kernel blocks (N; default {DEFAULT_NUM_BLOCKS}, in check "
                           f"{CHECK_NUM_BLOCKS['decode']}).", show_default=False)]
PPhysOpt = Annotated[Optional[int], EngineOption(
    "--p-blocks-per-logical", help="Expert: P's kernel blocks per logical block by hand (not what vLLM builds).",
    show_default=False)]
DPhysOpt = Annotated[Optional[int], EngineOption(
    "--d-blocks-per-logical", help="Expert: D's kernel blocks per logical block by hand (not what vLLM builds).",
    show_default=False)]
BACKEND_NAMES = "FLASH_ATTN, FLASHINFER or TRITON_ATTN"
BackendOpt = Annotated[Optional[str], EngineOption(
    "--attention-backend", help=f"Both engines' attention backend: {BACKEND_NAMES} (default: vLLM's choice for "
                                "the GPU, FLASHINFER on SM 10.x, else FLASH_ATTN).", show_default=False)]
PBackendOpt = Annotated[Optional[str], EngineOption(
    "--p-attention-backend", help="P's attention backend, when it differs.", show_default=False)]
DBackendOpt = Annotated[Optional[str], EngineOption(
    "--d-attention-backend", help="D's attention backend, when it differs.", show_default=False)]
BlockSizeOpt = Annotated[Optional[int], EngineOption(
    "--block-size", help="Both engines' --block-size in tokens (default: none given, so the release's: "
                         f"{releases.block_size_defaults()}; vLLM raises it for hybrids).", show_default=False)]
PBlockSizeOpt = Annotated[Optional[int], EngineOption(
    "--p-block-size", help="P's --block-size, when it differs.", show_default=False)]
DBlockSizeOpt = Annotated[Optional[int], EngineOption(
    "--d-block-size", help="D's --block-size, when it differs.", show_default=False)]
KvDtypeOpt = Annotated[Optional[str], EngineOption(
    "--kv-cache-dtype", help="Both engines' --kv-cache-dtype: auto (the model's dtype, the default), fp8, "
                             "bfloat16, ...", show_default=False)]
PKvDtypeOpt = Annotated[Optional[str], EngineOption(
    "--p-kv-cache-dtype", help="P's --kv-cache-dtype, when it differs.", show_default=False)]
DKvDtypeOpt = Annotated[Optional[str], EngineOption(
    "--d-kv-cache-dtype", help="D's --kv-cache-dtype, when it differs.", show_default=False)]
PrefixOpt = Annotated[Optional[bool], EngineOption(
    "--enable-prefix-caching/--no-enable-prefix-caching",
    help="Both engines' prefix caching (default on: vLLM enables it for hybrid models).", show_default=False)]
PPrefixOpt = Annotated[Optional[bool], EngineOption(
    "--p-enable-prefix-caching/--p-no-enable-prefix-caching", help="P's prefix caching, when it differs.",
    show_default=False)]
DPrefixOpt = Annotated[Optional[bool], EngineOption(
    "--d-enable-prefix-caching/--d-no-enable-prefix-caching", help="D's prefix caching, when it differs.",
    show_default=False)]
ServingEngineOpt = Annotated[str, EngineOption(
    "--engine", help=f"The serving engine of P and D: {described_engines()}.")]
VllmVersionOpt = Annotated[Optional[str], EngineOption(
    "--vllm-version", help=f"The vLLM release the engines run: {releases.choices()} (default: the vLLM installed "
                           "here, else the newest mambaxfer knows).", show_default=False)]
PVllmVersionOpt = Annotated[Optional[str], EngineOption(
    "--p-vllm-version", help="P's vLLM release, when it differs.", show_default=False)]
DVllmVersionOpt = Annotated[Optional[str], EngineOption(
    "--d-vllm-version", help="D's vLLM release, when it differs.", show_default=False)]
GpuOpt = Annotated[Optional[str], EngineOption(
    "--gpu", help="The engines' GPU: H100, H200, A100, L40S, B200, GB200, B300, RTX PRO 6000, ... or a "
                  "compute capability (sm90); also as nvidia-smi prints it ('NVIDIA H100 80GB HBM3'); /cu12 after it "
                  "for a CUDA 12 build (default H100).",
    show_default=False)]
GdnBackendOpt = Annotated[Optional[str], EngineOption(
    "--gdn-prefill-backend", help="vLLM's --gdn-prefill-backend for GDN models: flashinfer, triton or cutedsl "
                                  "(default: vLLM's choice for the GPU).", show_default=False)]
KvHeadsOpt = Annotated[Optional[int], ModelOption(
    "--kv-heads", help="Attention KV heads (default: the config's num_key_value_heads).", show_default=False)]
HeadSizeOpt = Annotated[Optional[int], ModelOption(
    "--head-size", help="Attention head size (default: the config's head_dim, else hidden_size / heads).",
    show_default=False)]


_said: set[str] = set()


def _release_when_unnamed():
    """The release of an engine given no --vllm-version: the vLLM installed here, else the newest
    mambaxfer knows; what to say about an installed release it does not know, said once."""
    from mambaxfer_cli.engines.vllm.installed import default_release

    found = default_release()
    if found.note and found.note not in _said:
        _said.add(found.note)
        typer.echo(f"note: {found.note}", err=True)
    return found.release


def modelled(engine: str) -> None:
    """Refuse, in one line, an engine whose rules the commands do not apply yet."""
    serving_engine(engine)
    if engine != DEFAULT_ENGINE:
        from mambaxfer_cli.engines.sglang import NOT_WIRED

        raise UserError(NOT_WIRED)


def _release(flag: str, name: str | None, engine: str = DEFAULT_ENGINE):
    if name is None:
        return _release_when_unnamed()
    try:
        return serving_engine(engine).release(name)
    except UserError as exc:
        raise UserError(f"{flag} {name}: {exc}") from None


def _gpu(name: str | None):
    from mambaxfer_cli.engines.vllm.gpu import DEFAULT_GPU, gpu

    if name is None:
        return DEFAULT_GPU
    try:
        return gpu(name)
    except UserError as exc:
        raise UserError(f"--gpu: {exc}") from None


def _own(own, shared):
    return shared if own is None else own


def engines(*, engine: str = DEFAULT_ENGINE, vllm_version: str | None = None, p_vllm_version: str | None = None,
            d_vllm_version: str | None = None, gpu: str | None = None, gdn_prefill_backend: str | None = None,
            attention_backend: str | None = None, p_attention_backend: str | None = None,
            d_attention_backend: str | None = None, block_size: int | None = None, p_block_size: int | None = None,
            d_block_size: int | None = None, kv_cache_dtype: str | None = None, p_kv_cache_dtype: str | None = None,
            d_kv_cache_dtype: str | None = None, enable_prefix_caching: bool | None = None,
            p_enable_prefix_caching: bool | None = None, d_enable_prefix_caching: bool | None = None,
            p_num_blocks: int | None = None, d_num_blocks: int | None = None,
            p_blocks_per_logical: int | None = None, d_blocks_per_logical: int | None = None):
    """Both engines from a command's engine options, built once: each side's own value where
    given, else the one both share, else the planner's default (``EngineFlags``'s, the release's
    block size, the installed vLLM's release)."""
    from mambaxfer_cli.engines.vllm.engine import Engines
    from mambaxfer_cli.engines.vllm.geometry import MAX_BLOCK_SIZE, EngineFlags

    check_bounds(p_num_blocks=p_num_blocks, d_num_blocks=d_num_blocks, p_blocks_per_logical=p_blocks_per_logical,
                 d_blocks_per_logical=d_blocks_per_logical)
    for flag, value in (("--block-size", block_size), ("--p-block-size", p_block_size),
                        ("--d-block-size", d_block_size)):
        if value is not None:
            within(flag, value, 1, MAX_BLOCK_SIZE, "engine's block")
    modelled(engine)
    device = _gpu(gpu)
    shared = _release("--vllm-version", vllm_version, engine) if vllm_version is not None else None

    def side(prefix: str, version, backend, size, kv, prefix_caching, num_blocks, per_logical) -> EngineFlags:
        flag = f"--{prefix}-vllm-version"
        chosen = _release(flag, version, engine) if version is not None else shared or _release_when_unnamed()
        given = dict(attention_backend=_own(backend, attention_backend), block_size=_own(size, block_size),
                     kv_cache_dtype=_own(kv, kv_cache_dtype),
                     prefix_caching=_own(prefix_caching, enable_prefix_caching),
                     gdn_prefill_backend=gdn_prefill_backend, num_blocks=num_blocks,
                     blocks_per_logical=per_logical)
        return EngineFlags(release=chosen, gpu=device, **{k: v for k, v in given.items() if v is not None})

    if gdn_prefill_backend is not None:
        from mambaxfer_cli.engines.vllm.gpu import gdn_prefill_backend as resolve

        try:
            resolve(device, None, gdn_prefill_backend)
        except UserError as exc:
            raise UserError(f"--gdn-prefill-backend: {exc}") from None
    return Engines(
        side("p", p_vllm_version, p_attention_backend, p_block_size, p_kv_cache_dtype, p_enable_prefix_caching,
             p_num_blocks, p_blocks_per_logical),
        side("d", d_vllm_version, d_attention_backend, d_block_size, d_kv_cache_dtype, d_enable_prefix_caching,
             d_num_blocks, d_blocks_per_logical))


StreamsOpt = Annotated[int, EngineOption(
    "--attention-streams", help="Attention streams per KV-cache tensor: 1 (vLLM) or 2 (K and V split).")]
KvGroupsOpt = Annotated[Optional[str], EngineOption(
    "--kv-groups", help="KV-cache groups by hand, e.g. 'ssm*7,attention' (default: vLLM's rule).")]
KvTensorsOpt = Annotated[Optional[int], EngineOption(
    "--kv-tensors", help="KV-cache tensors, with --kv-groups.")]
SsmTensorsOpt = Annotated[Optional[int], EngineOption(
    "--ssm-tensors", help="Tensors that hold SSM layers, with --kv-groups (default: all).")]
RequestBlocksOpt = Annotated[int, RequestOption(
    "--request-blocks", help="Logical blocks per KV-cache group in the generated request.")]
PrefillBlocksOpt = Annotated[Optional[str], RequestOption(
    "--prefill-blocks", help="The request's P logical block IDs per group, e.g. '3,5;1;2' (';' between groups).")]
DecodeBlocksOpt = Annotated[Optional[str], RequestOption(
    "--decode-blocks", help="The request's D logical block IDs per group, like --prefill-blocks.")]
SeedOpt = Annotated[int, RequestOption("--seed", help="Seed of the generated request's block IDs.")]


def plan_options(*, semantics: Semantics, coalesce: bool, engines, attention_streams: int,
                 kv_groups: str | None, kv_tensors: int | None, ssm_tensors: int | None,
                 request_blocks: int, prefill_blocks: str | None, decode_blocks: str | None, seed: int):
    """PlanOptions from the command line's values; ``engines``: both engines (``engines()``)."""
    from mambaxfer_cli.planning.kv_groups import parse_grouping
    from mambaxfer_cli.engines.vllm.plan import PlanOptions

    check_bounds(attention_streams=attention_streams, kv_tensors=kv_tensors, ssm_tensors=ssm_tensors,
                 request_blocks=request_blocks, seed=seed)
    if kv_groups is None and (kv_tensors is not None or ssm_tensors is not None):
        raise UserError("--kv-tensors and --ssm-tensors only apply with --kv-groups")
    grouping = parse_grouping(kv_groups, kv_tensors, ssm_tensors) if kv_groups is not None else None
    return PlanOptions(
        semantics=semantics.value, coalesce=coalesce, prefill=engines.prefill, decode=engines.decode,
        attention_streams=attention_streams, grouping=grouping, request_blocks=request_blocks,
        prefill_blocks=prefill_blocks, decode_blocks=decode_blocks, seed=seed)
