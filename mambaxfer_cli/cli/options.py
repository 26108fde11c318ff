"""The option groups commands take, each option declared once (an engine reads the groups it is
handed: vLLM's ``engines/vllm/options.py``), and the model a group names (``ModelArgs.load``)."""

from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass, fields
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import typer

from mambaxfer_cli.cli.params import ENGINES, MODEL, OUTPUT, REQUEST, Group, option, running
from mambaxfer_cli.errors import UserError, clipped
from mambaxfer_cli.families import LABELS
from mambaxfer_cli.limits import MAX_TP, at_most, check_bounds
from mambaxfer_cli.engines import DEFAULT as DEFAULT_ENGINE
from mambaxfer_cli.engines import engine as serving_engine
from mambaxfer_cli.engines import described as described_engines
from mambaxfer_cli.engines import names as engine_names
from mambaxfer_cli.planning.model import ModelSpec, Variant
from mambaxfer_cli.planning.variants import names as variant_names

if TYPE_CHECKING:
    from mambaxfer_cli.readers.model_config import Startup

QSA = LABELS["QSA"]     # the family whose QSA indexer --indexer-kv-dtype sets


class Format(str, Enum):
    table = "table"
    json = "json"
    yaml = "yaml"


class Semantics(str, Enum):
    """Whose reads: mambaxfer's unit-exact ones, vLLM's, or (``check``) both; SGLang's writes
    (``execute --engine sglang``)."""
    exact = "exact"
    vllm = "vllm"
    both = "both"
    sglang = "sglang"


def refuse_value(name: str, value: Any, choices: tuple[str, ...]) -> typer.BadParameter:
    """A value this command does not take, said as typer says a wrong choice."""
    ctx = running()
    names = [o for p in (ctx.command.params if ctx is not None else ()) if p.name == name for o in p.opts]
    shown = getattr(value, "value", value)
    return typer.BadParameter(f"{shown!r} is not one of {', '.join(map(repr, choices))}.", ctx=ctx,
                              param_hint=" / ".join(f"'{n}'" for n in names) or None)


MODEL_HELP = ("A built-in preset (see 'mambaxfer models'), a config.json, a model directory, "
              "a YAML model file, or a Hugging Face repo id already in the local cache.")


def _completed(values: Any, incomplete: str) -> list[str]:
    return [v for v in dict.fromkeys(values) if v.startswith(incomplete)]     # typer keeps these alone


def preset_completed(incomplete: str) -> list[str]:
    """``--model``'s completion: the built-in presets (a path or a repo id is the shell's to type)."""
    from mambaxfer_cli.readers.model_source import preset_names

    return _completed(preset_names(), incomplete)


def engine_completed(incomplete: str) -> list[str]:
    """``--engine``'s completion: an engine's name, also after a comma (``vllm,sg``)."""
    typed, _, last = incomplete.rpartition(",")
    head = typed + "," if typed else ""
    return [head + name for name in _completed(engine_names(), last) if name not in typed.split(",")]


def values_completed(field: str) -> Any:
    """An option's completion from the engines' facts (``ServingEngine.option_values``)."""
    def complete(incomplete: str) -> list[str]:
        return _completed((v for name in engine_names() for v in serving_engine(name).option_values().get(field, ())),
                          incomplete)
    return complete


def variant_named(value: str) -> Variant:
    """``--variant``: a variant's name, in any case (``planning/variants/`` lists them)."""
    try:
        return Variant(value.strip().lower())
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(map(repr, variant_names()))}.") from None


@dataclass(frozen=True)
class ModelArgs(Group):
    """The model: which one, and what overrides its config."""

    model: str | None = option("--model", "-m", help=MODEL_HELP, panel=MODEL, complete=preset_completed)
    all_presets: bool = option("--all-presets/--no-all-presets",
                               help="Run on every built-in model the engine serves.",
                               panel=MODEL, default=False)
    variant: Variant | None = option("--variant", help="Override variant detection.", panel=MODEL,
                                     parser=variant_named, metavar="<Variant>")
    dtype: str | None = option(
        "--dtype", help="vLLM's --dtype: auto (the config's torch_dtype; a float32 checkpoint runs in bfloat16, as "
                        "vLLM runs it), bfloat16, float16 or float32. The conv state's dtype follows it.", panel=MODEL)
    conv_dtype: str | None = option("--conv-dtype", help="Conv state dtype (default: the model's dtype, --dtype).",
                                    panel=MODEL)
    ssm_dtype: str | None = option(
        "--ssm-dtype", help="Temporal (SSM) state dtype (default: the model's, else the conv dtype).", panel=MODEL)
    num_spec: int | None = option(
        "--num-spec", help="Speculative tokens: extra conv rows for Mamba2 and GDN (default 0).", panel=MODEL)
    kv_heads: int | None = option(
        "--kv-heads", help="Attention KV heads (default: the config's num_key_value_heads).", panel=MODEL)
    head_size: int | None = option(
        "--head-size", help="Attention head size (default: the config's head_dim, else hidden_size / heads).",
        panel=MODEL)
    indexer_kv_dtype: str | None = option(
        "--indexer-kv-dtype", help=f"{QSA}: vLLM's --attention-config indexer_kv_dtype, the QSA compressed keys' "
                                   "dtype: auto (bf16), bf16 or fp8.", panel=MODEL)

    def load(self, name: str | None = None, startup: Startup | None = None) -> ModelSpec:
        """The model (``name``, else --model) with this group's overrides; ``startup``: the engine's
        start-up rules (``spec_from_config``'s)."""
        from mambaxfer_cli.planning.dtypes import flag_dtype
        from mambaxfer_cli.readers.model_source import load_model

        check_bounds(num_spec=self.num_spec, kv_heads=self.kv_heads, head_size=self.head_size)
        given = {**self.overrides(), "conv_dtype": flag_dtype("--conv-dtype", self.conv_dtype),
                 "ssm_dtype": flag_dtype("--ssm-dtype", self.ssm_dtype),
                 "dtype": flag_dtype("--dtype", self.dtype) or self.dtype}
        spec = load_model(name or self.model or "", **given, startup=startup)
        if self.indexer_kv_dtype is not None and (spec.ple_qsa is None or not spec.ple_qsa.has_qsa):
            raise UserError(f"--indexer-kv-dtype: {spec.name} has no QSA indexer ({QSA}'s), which is all it sets")
        return spec

    def names(self) -> list[str]:
        """--model, or every preset with --all-presets: one of them."""
        if (self.model is None) == (not self.all_presets):
            raise UserError("give --model M or --all-presets (one of them)")
        if self.model is not None:
            return [self.model]
        from mambaxfer_cli.readers.model_source import preset_names

        return preset_names()

    def overrides(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("model", "all_presets")}


@dataclass(frozen=True)
class PairArgs(Group):
    """The deployment's two TP sizes."""

    p_tp: int | None = option("--p-tp", help="Prefill (P) tensor-parallel size.", panel=ENGINES)
    d_tp: int | None = option("--d-tp", help="Decode (D) tensor-parallel size.", panel=ENGINES)


def _side(what: str) -> tuple[str, str]:
    """The help of a shared flag's P and D forms."""
    return f"P's {what}, when it differs.", f"D's {what}, when it differs."


BACKEND_NAMES = "FLASH_ATTN, FLASHINFER or TRITON_ATTN"
_P_RELEASE, _D_RELEASE = _side("vLLM release")
_P_BACKEND, _D_BACKEND = _side("attention backend")
_P_SIZE, _D_SIZE = _side("--block-size")
_P_KV, _D_KV = _side("--kv-cache-dtype")
_P_PREFIX, _D_PREFIX = _side("prefix caching")
_EXPERT = "Expert: {}'s kernel blocks per logical block by hand (not what vLLM builds)."


def _facts(name: str) -> Callable[[], str]:
    """The help that states the default engine's own facts (its releases, their defaults), from its
    package, imported only where the option is declared."""
    return lambda: serving_engine(DEFAULT_ENGINE).option_help()[name]


@dataclass(frozen=True)
class EngineArgs(Group):
    """Both engines: each flag of ``vllm serve`` mambaxfer models, for both sides and, where the
    two may differ, for P and for D (``--p-...``, ``--d-...``: the side's own value wins)."""

    engine: str = option("--engine", help=lambda: f"The serving engine of P and D: {described_engines()}.",
                         panel=ENGINES, default=DEFAULT_ENGINE, complete=engine_completed)
    transfer_backend: str | None = option(
        "--transfer-backend", help="SGLang's disaggregation transfer backend (--engine sglang): mooncake "
                                   "(SGLang's default) or nixl.", panel=ENGINES)
    speculative_algorithm: str | None = option(
        "--speculative-algorithm", help="SGLang's --speculative-algorithm (--engine sglang): NEXTN "
                                        "or EAGLE (the model's MTP layer), EAGLE3, STANDALONE; the draft's KV "
                                        "pool moves after the target's.", panel=ENGINES, metavar="NAME")
    speculative_draft_model_path: str | None = option(
        "--draft-model", help="SGLang's speculative draft model path (--engine sglang): the drafter's "
                              "config.json or its folder.", panel=ENGINES, metavar="PATH")
    vllm_version: str | None = option(
        "--vllm-version", help=_facts("vllm_version"), panel=ENGINES, complete=values_completed("vllm_version"))
    p_vllm_version: str | None = option("--p-vllm-version", help=_P_RELEASE, panel=ENGINES,
                                        complete=values_completed("p_vllm_version"))
    d_vllm_version: str | None = option("--d-vllm-version", help=_D_RELEASE, panel=ENGINES,
                                        complete=values_completed("d_vllm_version"))
    gpu: str | None = option(
        "--gpu", help="The engines' GPU as nvidia-smi prints it ('NVIDIA GeForce RTX 4090', 'NVIDIA H100 80GB "
                      "HBM3') or by its name (H100, A100, L40S, RTX 4090, B200, T4, V100, ...), in any case, or its "
                      "compute capability (sm90); /cu12 after it for a CUDA 12 build (default H100).", panel=ENGINES,
        complete=values_completed("gpu"))
    gdn_prefill_backend: str | None = option(
        "--gdn-prefill-backend", help="vLLM's --gdn-prefill-backend for GDN models: flashinfer, triton or cutedsl "
                                      "(default: vLLM's choice for the GPU).", panel=ENGINES)
    attention_backend: str | None = option(
        "--attention-backend", help=f"Both engines' attention backend: {BACKEND_NAMES} (default: vLLM's choice "
                                    "for the GPU, FLASHINFER on SM 10.x, else FLASH_ATTN).", panel=ENGINES)
    p_attention_backend: str | None = option("--p-attention-backend", help=_P_BACKEND, panel=ENGINES)
    d_attention_backend: str | None = option("--d-attention-backend", help=_D_BACKEND, panel=ENGINES)
    block_size: int | None = option(
        "--block-size", help=_facts("block_size"), panel=ENGINES)
    p_block_size: int | None = option("--p-block-size", help=_P_SIZE, panel=ENGINES)
    d_block_size: int | None = option("--d-block-size", help=_D_SIZE, panel=ENGINES)
    kv_cache_dtype: str | None = option(
        "--kv-cache-dtype", help="Both engines' --kv-cache-dtype: auto (the model's dtype, the default), fp8, "
                                 "bfloat16, ...", panel=ENGINES)
    p_kv_cache_dtype: str | None = option("--p-kv-cache-dtype", help=_P_KV, panel=ENGINES)
    d_kv_cache_dtype: str | None = option("--d-kv-cache-dtype", help=_D_KV, panel=ENGINES)
    kv_cache_layout: str | None = option(
        "--kv-cache-layout", help="Both engines' VLLM_KV_CACHE_LAYOUT: LBHNC, BLHNC, LBNHC, ... (default: unset, so "
                                  f"vLLM's pick: the NIXL connector's LBHNC, BLNHC for {QSA}'s QSA).", panel=ENGINES)
    enable_prefix_caching: bool | None = option(
        "--enable-prefix-caching/--no-enable-prefix-caching",
        help="Both engines' prefix caching (default on: vLLM enables it for hybrid models).", panel=ENGINES)
    p_enable_prefix_caching: bool | None = option(
        "--p-enable-prefix-caching/--p-no-enable-prefix-caching", help=_P_PREFIX, panel=ENGINES)
    d_enable_prefix_caching: bool | None = option(
        "--d-enable-prefix-caching/--d-no-enable-prefix-caching", help=_D_PREFIX, panel=ENGINES)
    p_num_blocks: int | None = option(
        "--p-num-blocks", help=_facts("p_num_blocks"), panel=ENGINES)
    d_num_blocks: int | None = option(
        "--d-num-blocks", help=_facts("d_num_blocks"), panel=ENGINES)
    speculative_config: str | None = option(
        "--speculative-config", help="Both engines' --speculative-config, vLLM's JSON, e.g. "
                                     "'{\"method\": \"mtp\", \"num_speculative_tokens\": 1}': conv rows for its "
                                     "tokens, the draft's MTP layers where the model's config declares them, and an "
                                     "EAGLE / EAGLE-3 drafter's layers (its \"model\": a config file, folder or "
                                     "cached repo id) where its pages are the target's.",
        panel=ENGINES, metavar="JSON")
    p_blocks_per_logical: int | None = option("--p-blocks-per-logical", help=_EXPERT.format("P"), panel=ENGINES)
    d_blocks_per_logical: int | None = option("--d-blocks-per-logical", help=_EXPERT.format("D"), panel=ENGINES)

    # What a command that runs one engine's geometry (execute, bench, inspect) takes: no side's own.
    SHARED = ("engine", "vllm_version", "gpu", "gdn_prefill_backend", "attention_backend", "block_size",
              "kv_cache_dtype", "enable_prefix_caching")
    ONE_ENGINE = (*SHARED, "speculative_config", "speculative_algorithm", "speculative_draft_model_path")


@dataclass(frozen=True)
class RequestArgs(Group):
    """The request and how its reads are laid out: whose reads, its block IDs, the KV-cache grouping."""

    semantics: Semantics | None = option(
        "--semantics", help="exact: mambaxfer's unit-exact reads; vllm: what vLLM issues; both (check's default): "
                            "mambaxfer's exact plan and what vLLM does (accepts and moves the right bytes, corrupts "
                            "them, or refuses); sglang: SGLang's own writes (--engine sglang). Default: plan "
                            "exact, check both, execute and bench what the engine moves (vllm, sglang).",
        panel=REQUEST)
    coalesce: bool = option("--coalesce/--no-coalesce", help="Merge segments adjacent on both sides into one "
                                                             "descriptor.", panel=REQUEST, default=False)
    attention_streams: int = option(
        "--attention-streams", help="Attention streams per KV-cache tensor: 1 (vLLM) or 2 (K and V split).",
        panel=ENGINES, default=1)
    kv_groups: str | None = option(
        "--kv-groups", help="KV-cache groups by hand, e.g. 'ssm*7,attention' (default: vLLM's rule).", panel=ENGINES)
    kv_tensors: int | None = option("--kv-tensors", help="KV-cache tensors, with --kv-groups.", panel=ENGINES)
    ssm_tensors: int | None = option(
        "--ssm-tensors", help="Tensors that hold SSM layers, with --kv-groups (default: all).", panel=ENGINES)
    request_blocks: int = option(
        "--request-blocks", help="Logical blocks per KV-cache group in the request, at block IDs drawn at random.",
        panel=REQUEST, default=1)
    prefill_blocks: str | None = option(
        "--prefill-blocks", help="The request's P logical block IDs per group, e.g. '3,5;1;2' (';' between groups).",
        panel=REQUEST)
    decode_blocks: str | None = option(
        "--decode-blocks", help="The request's D logical block IDs per group, like --prefill-blocks.", panel=REQUEST)
    seed: int = option("--seed", help="Seed of the request's block IDs.", panel=REQUEST, default=0)

    def reads(self, both: bool = False, default: str | None = None) -> str:
        """--semantics as the planner takes it: unless given, ``default`` (the engine's own reads), else
        exact; ``both`` only where the command proves both (check, whose default it is)."""
        if self.semantics is None:
            return default or (Semantics.both.value if both else Semantics.exact.value)
        if (self.semantics is Semantics.both and not both) or self.semantics is Semantics.sglang:
            raise refuse_value("semantics", self.semantics, ("exact", "vllm", "both") if both else ("exact", "vllm"))
        return self.semantics.value


@dataclass(frozen=True)
class RunArgs(Group):
    """A run of real NIXL agents (execute, bench): where, how long, how often."""

    device: str | None = option(
        "--device", help="cuda: VRAM on the visible GPUs; cpu: DRAM over UCX; auto: cuda when available; bench: "
                         "comma-separated for a sweep, e.g. cpu,cuda (default: auto; bench: cpu).", panel=ENGINES)
    layers: int | None = option(
        "--layers", help="Use only the model's first N cache-keeping layers (fewer KV-cache tensors). Default: all.",
        panel=MODEL)
    iters: int = option("--iters", help="Transfers per run and direction (median; bench: and p99).", panel=REQUEST,
                        default=3)
    timeout: float = option(
        "--timeout", help="Stop the run after this many seconds without progress (no rank working or reaching a "
                          "new step).", panel=REQUEST, default=120.0)

    DEVICES = ("auto", "cpu", "cuda")

    def devices(self, default: str = "auto") -> list[tuple[str, int]]:
        """--device resolved: each named device's kind and GPU count, in order."""
        from mambaxfer_cli.execute.device import resolve_device

        names = [x.strip().lower() for x in (self.device or default).split(",") if x.strip()] or [default]
        for name in names:
            if name not in self.DEVICES:
                raise refuse_value("device", name, self.DEVICES)
        return [resolve_device(name) for name in names]

    def device_one(self) -> tuple[str, int]:
        """--device when one run takes one device."""
        if self.device is not None and self.device.strip().lower() not in self.DEVICES:
            raise refuse_value("device", self.device, self.DEVICES)
        return self.devices()[0]


def need_nixl() -> None:
    """A run's ranks need NIXL: its absence is said before any rank starts."""
    import importlib.util

    from mambaxfer_cli.execute.nixl_api import INSTALL_HINT

    if importlib.util.find_spec("nixl") is None:
        raise UserError(f"NIXL is not installed; {INSTALL_HINT}")


def needed(model: ModelArgs, pair: PairArgs, alternative: str = "") -> tuple[int, int]:
    """--p-tp and --d-tp, once --model and they are given (``alternative``: what else would do)."""
    missing = [flag for flag, value in (("--model", model.model), ("--p-tp", pair.p_tp), ("--d-tp", pair.d_tp))
               if value is None]
    if missing or pair.p_tp is None or pair.d_tp is None:
        raise UserError(f"execute needs {', '.join(missing)}{alternative}")
    return pair.p_tp, pair.d_tp


# A sweep's largest TP size (check, conformance): one declaration that both commands take.
MAX_TP_OPTION: int | None = option(
    "--max-tp", help="Every pairing of the model's valid TP sizes up to N (default 8; check: unless --pairs).",
    panel=ENGINES)


STDOUT = Path("-")


def a_file(value: str) -> Path:
    """``--junit``, ``--chart``: a file, never ``-``: standard output carries the report."""
    if value == str(STDOUT):
        raise typer.BadParameter("'-' is standard output, which carries the report; name a file.")
    return Path(value)


def a_document_path(value: str) -> Path:
    """``-`` is standard output (``--output``) or input (``--plan``); ``./-`` is a file named ``-``."""
    path = Path(value)
    return path if value == str(STDOUT) or path != STDOUT else Path.cwd() / path


@dataclass(frozen=True)
class OutputArgs(Group):
    """Where and how a command says its result."""

    fmt: Format = option("--format", "-f", help="table, json or yaml (mambaxfer.{command}/v1).", panel=OUTPUT,
                         default=Format.table)
    output: Path | None = option("--output", "-o", help="Write the document (JSON, or YAML with --format yaml) "
                                                        "to FILE ('-': standard output).", panel=OUTPUT,
                                 parser=a_document_path, metavar="<path>")
    junit: Path | None = option("--junit", help="Also write the results as JUnit XML to FILE.", panel=OUTPUT,
                                parser=a_file, metavar="<path>")

    def document_format(self) -> Format:
        """The format of a document written to a file: YAML when asked, else JSON."""
        return Format.yaml if self.fmt is Format.yaml else Format.json


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
    """Write ``--output``/``--junit`` whole or not at all (a temp file renamed over it, the old mode
    kept, a new file the umask's); a symlink is followed, a device or pipe written through."""
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
