"""What conformance compares: the engine flags it varies, the pairings, the request, and the
values both sides answer in (plain data, so that neither side's types leak into the other)."""

from __future__ import annotations

import itertools
import json
import shlex
from dataclasses import dataclass, replace
from typing import Iterable

from mambaxfer_cli.conformance.report import Tally, plain
from mambaxfer_cli.engines.vllm.serve_args import CONV_LAYOUT_VAR, KV_LAYOUT_VAR
from mambaxfer_cli.planning.model import ModelSpec

# The attention backends NIXL hybrids run on NVIDIA GPUs, and the serve flags that change an
# engine's blocks: --block-size (None: not given, the release's default) and prefix caching.
BACKENDS = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN")
DEFAULT_BACKEND = "FLASH_ATTN"    # vLLM's pick on the modelled GPU (an H100) without --attention-backend
EXPLICIT_BLOCK_SIZE = 32          # a --block-size every backend accepts as a kernel block

# The --speculative-config of a model's drafted cases: MTP from its own checkpoint, where its family
# declares the MTP layers (their tensors and descriptor IDs join the target's KV-cache groups).
DRAFT_CONFIG = '{"method":"mtp","num_speculative_tokens":1}'


def drafted(speculative: str) -> str:
    """After the model's name, where the report counts its drafted cases: `` + MTP``, `` + EAGLE3``."""
    return " + " + str(json.loads(speculative).get("method") or "draft").upper()

# Engines of different sizes on the two sides catch an ID computed with the other engine's N.
P_NUM_BLOCKS = 4096
D_NUM_BLOCKS = 2048


@dataclass(frozen=True)
class Flags:
    """One engine's serve flags that shape its blocks; both engines of a case share them."""

    backend: str = DEFAULT_BACKEND
    block_size: int | None = None       # None: --block-size not given
    prefix_caching: bool = True
    ssm_dtype: str | None = None        # --mamba-ssm-cache-dtype (mambaxfer's --ssm-dtype); None: auto

    def cli(self) -> list[str]:
        """The same flags on a ``mambaxfer plan`` command line."""
        out = [] if self.backend in PICKED_BACKENDS else ["--attention-backend", self.backend]
        if self.ssm_dtype is not None:
            out += ["--ssm-dtype", self.ssm_dtype]
        if self.block_size is not None:
            out += ["--block-size", str(self.block_size)]
        if not self.prefix_caching:
            out.append("--no-enable-prefix-caching")
        return out

    def label(self) -> str:
        words = [self.backend, "--block-size " + (str(self.block_size) if self.block_size else "default"),
                 "prefix caching " + ("on" if self.prefix_caching else "off")]
        if self.ssm_dtype is not None:
            words.append(f"--mamba-ssm-cache-dtype {self.ssm_dtype}")
        return ", ".join(words)


def _flag_variants(*backends: str) -> tuple[Flags, ...]:
    return tuple(Flags(backend, block, prefix) for backend, block, prefix in itertools.product(
        backends, (None, EXPLICIT_BLOCK_SIZE), (True, False)))


DEFAULT_FLAGS = Flags()
FLAG_VARIANTS = _flag_variants(*BACKENDS)
# An MLA model's backends, those whose vLLM class imports without a GPU (FLASH_ATTN_MLA needs
# vLLM's flash-attention build, CUTLASS_MLA a driver).
MLA_BACKENDS = ("TRITON_MLA", "FLASHMLA", "FLASHINFER_MLA")
MLA_FLAG_VARIANTS = _flag_variants(*MLA_BACKENDS)
# GLM-5-Next's MLA layers run the sparse MLA backend vLLM picks for the GPU (its dense MLA
# backends refuse a sparse model, and mambaxfer refuses --attention-backend for it): on the
# modelled H100, FlashInfer's SM90 kernel. Its engines vary only --block-size and prefix caching.
SPARSE_MLA_BACKEND = "FLASHINFER_MLA_SPARSE_SM90"
SPARSE_FLAG_VARIANTS = _flag_variants(SPARSE_MLA_BACKEND)
# Backends vLLM picks on the modelled GPU without --attention-backend: never on a command line.
PICKED_BACKENDS = (DEFAULT_BACKEND, SPARSE_MLA_BACKEND)


def flag_variants(model: ModelSpec) -> tuple[Flags, ...]:
    """The engine flags every case of ``model`` runs under: its attention backends'."""
    if model.kpool_indexer is not None:
        return SPARSE_FLAG_VARIANTS
    return MLA_FLAG_VARIANTS if model.mla else FLAG_VARIANTS


@dataclass(frozen=True)
class Geometry:
    """One engine's blocks (tokens) and page (bytes), whichever side derived them."""

    block_size: int                 # logical block
    kernel_block_size: int
    blocks_per_logical: int
    page_bytes: int
    num_blocks: int                 # kernel blocks (N)
    prefix_caching: bool
    has_attention: bool = True

    @property
    def kernel_block_bytes(self) -> int:
        return self.page_bytes // self.blocks_per_logical

    @property
    def logical_blocks(self) -> int:
        return self.num_blocks // self.blocks_per_logical

    def shown(self) -> str:
        if not self.has_attention:
            return f"page {self.page_bytes} bytes"
        return (f"block {self.block_size} tokens = {self.blocks_per_logical} x {self.kernel_block_size}, "
                f"page {self.page_bytes} bytes")


@dataclass(frozen=True)
class Request:
    """One request's logical block IDs on each side (a tuple per KV-cache group), and its tokens."""

    prefill_blocks: tuple[tuple[int, ...], ...]
    decode_blocks: tuple[tuple[int, ...], ...]
    tokens: int

    def cli(self) -> list[str]:
        def text(groups):
            return ";".join(",".join(map(str, g)) for g in groups)
        return ["--prefill-blocks", text(self.prefill_blocks), "--decode-blocks", text(self.decode_blocks)]


@dataclass(frozen=True)
class Case:
    """One input both sides answer: a model at TP sizes and flags, maybe a D rank or a request."""

    model: str                      # the --model argument that reproduces it
    p_tp: int | None = None
    d_tp: int | None = None
    tp: int | None = None           # a single engine (conv split, geometry)
    flags: Flags | None = None
    d_rank: int | None = None
    request: Request | None = None
    variation: "Variation | None" = None   # a compatibility-hash case: what differs between P and D
    push: bool = False              # NixlPushConnector (P writes) rather than NixlConnector (D reads)
    rules: tuple[str, ...] = ()     # --vllm-version and --gpu of mambaxfer's side
    speculative: str = ""           # the --speculative-config both engines run with ("": none)

    def describe(self) -> str:
        parts = [self.model + (f" with --speculative-config {self.speculative}" if self.speculative else ""),
                 self.tp is not None and f"TP {self.tp}",
                 self.p_tp is not None and f"P TP {self.p_tp} / D TP {self.d_tp}",
                 self.d_rank is not None and f"D rank {self.d_rank}", self.flags is not None and self.flags.label(),
                 self.variation is not None and self.variation.name, self.push and "NixlPushConnector"]
        return ", ".join(part for part in parts if part)

    def command(self) -> str:
        """A ``mambaxfer`` command line that shows mambaxfer's side of this case."""
        model = shlex.quote(self.model)
        flags = (self.flags.cli() if self.flags else []) + (
            ["--speculative-config", self.speculative] if self.speculative else [])
        if self.variation is not None or self.push:
            variation = self.variation or _engines_of(self)
            p_line, d_line = (shlex.join([*engine.env_words(), "vllm", "serve", self.model, *words])
                              for engine, words in zip((variation.prefill, variation.decode), variation.serve_words()))
            return (f"mambaxfer preflight --prefill {_double_quoted(p_line)} --decode {_double_quoted(d_line)}"
                    + "".join(f" {w}" for w in self.rules))
        if self.p_tp is None:
            tail = " ".join(["--tp", str(self.tp), *flags, *self.rules])
            return f"mambaxfer inspect --model {model} {tail}"
        words = ["--p-tp", str(self.p_tp), "--d-tp", str(self.d_tp), "--semantics", "vllm", *flags, *self.rules]
        if self.request is not None:
            words += ["--p-num-blocks", str(P_NUM_BLOCKS), "--d-num-blocks", str(D_NUM_BLOCKS),
                      *self.request.cli()]
        if self.d_rank is not None:
            words += ["--d-rank", str(self.d_rank)]
        return f"mambaxfer plan --model {model} " + " ".join(shlex.quote(w) for w in words)


def _double_quoted(text: str) -> str:
    """``text`` as one double-quoted shell word (so the single quotes inside it stay readable)."""
    return '"' + "".join("\\" + c if c in '"\\$`' else c for c in text) + '"'


@dataclass(frozen=True)
class HashedEngine:
    """One engine's settings that might enter vLLM's NIXL compatibility hash."""

    dtype: str | None = None                 # None: the model's
    kv_cache_dtype: str = "auto"
    backend: str = DEFAULT_BACKEND
    block_size: int | None = None
    prefix_caching: bool = True
    tp: int = 1
    mamba_ssm_dtype: str | None = None
    speculative: tuple[str, int] | None = None   # (method, tokens)
    push: bool = False
    kv_cache_layout: str | None = None       # VLLM_KV_CACHE_LAYOUT
    env: tuple[str, ...] = ()                # other VAR=value words of the line
    extra: tuple[str, ...] = ()              # other serve words (--use-replayssm and its settings)

    def env_words(self) -> list[str]:
        """The line's environment before ``vllm serve``."""
        layout = [f"{KV_LAYOUT_VAR}={self.kv_cache_layout}"] if self.kv_cache_layout else []
        return [f"{CONV_LAYOUT_VAR}=DS", *layout, *self.env]

    def serve_words(self, role: str) -> list[str]:
        """This engine's ``vllm serve`` flags (after the model)."""
        connector = "NixlPushConnector" if self.push else "NixlConnector"
        words = ["--kv-transfer-config", f'{{"kv_connector":"{connector}","kv_role":"{role}"}}']
        backend = None if self.backend in PICKED_BACKENDS else self.backend
        for flag, value, default in (("--dtype", self.dtype, None), ("--kv-cache-dtype", self.kv_cache_dtype, "auto"),
                                     ("--attention-backend", backend, None),
                                     ("--block-size", self.block_size, None), ("-tp", self.tp, 1),
                                     ("--mamba-ssm-cache-dtype", self.mamba_ssm_dtype, None)):
            if value != default:
                words += [flag, str(value)]
        if not self.prefix_caching:
            words.append("--no-enable-prefix-caching")
        if self.speculative is not None:
            method, tokens = self.speculative
            words += ["--speculative-config", f'{{"method":"{method}","num_speculative_tokens":{tokens}}}']
        return words + list(self.extra)


@dataclass(frozen=True)
class Variation:
    """Two engines that differ in one setting: does the compatibility hash tell them apart?"""

    name: str
    prefill: HashedEngine
    decode: HashedEngine = HashedEngine()

    def serve_words(self) -> tuple[list[str], list[str]]:
        return self.prefill.serve_words("kv_producer"), self.decode.serve_words("kv_consumer")


HASH_VARIATIONS = (
    Variation("the same engine on both sides", HashedEngine()),
    Variation("--dtype float16 on P", HashedEngine(dtype="float16")),
    Variation("--kv-cache-dtype fp8 on P", HashedEngine(kv_cache_dtype="fp8")),
    Variation("--attention-backend FLASHINFER on P", HashedEngine(backend="FLASHINFER")),
    Variation("NixlPushConnector on P", HashedEngine(push=True)),
    Variation("MTP on P only", HashedEngine(speculative=("mtp", 1))),
    Variation("MTP 1 token on P, 2 on D", HashedEngine(speculative=("mtp", 1)), HashedEngine(speculative=("mtp", 2))),
    Variation("-tp 2 on P", HashedEngine(tp=2)),
    Variation("--block-size 32 on P", HashedEngine(block_size=32)),
    Variation("--no-enable-prefix-caching on P", HashedEngine(prefix_caching=False)),
    Variation("--mamba-ssm-cache-dtype float16 on P", HashedEngine(mamba_ssm_dtype="float16")),
)


def _on(variation: Variation, default: str, other: str) -> Variation:
    """A variation on other backends: ``default`` for vLLM's default, ``other`` for the one it names."""
    def on(engine: HashedEngine) -> HashedEngine:
        return replace(engine, backend=default if engine.backend == DEFAULT_BACKEND else other)

    return Variation(variation.name.replace("FLASHINFER", other), on(variation.prefill), on(variation.decode))


# MLA: TRITON_MLA on both sides, FLASHMLA where P's backend changes. Not --mamba-ssm-cache-dtype: the
# MLA hybrids' KDA state is float32 whatever it says, and vLLM does not start an engine whose blocks
# it sizes for another dtype.
MLA_HASH_VARIATIONS = tuple(_on(v, MLA_BACKENDS[0], "FLASHMLA") for v in HASH_VARIATIONS
                            if v.prefill.mamba_ssm_dtype is None)
# GLM-5-Next: both engines on the sparse MLA backend vLLM picks; as MLA's, less the one that names
# another backend on P (its backend is the GPU's).
SPARSE_HASH_VARIATIONS = tuple(_on(v, SPARSE_MLA_BACKEND, SPARSE_MLA_BACKEND) for v in HASH_VARIATIONS
                               if v.prefill.mamba_ssm_dtype is None and v.prefill.backend == DEFAULT_BACKEND)


def hash_variations(model: ModelSpec) -> tuple[Variation, ...]:
    """The engine pairs whose compatibility hashes are compared for ``model``."""
    if model.kpool_indexer is not None:
        return SPARSE_HASH_VARIATIONS
    return MLA_HASH_VARIATIONS if model.mla else HASH_VARIATIONS


def _engines_of(case: Case) -> Variation:
    """A pairing case's two engines as ``vllm serve`` lines for ``preflight``."""
    flags = case.flags or DEFAULT_FLAGS
    assert case.p_tp is not None and case.d_tp is not None, "a pairing case has both TP sizes"

    def engine(tp: int) -> HashedEngine:
        return HashedEngine(backend=flags.backend, block_size=flags.block_size, prefix_caching=flags.prefix_caching,
                            tp=tp, push=case.push)

    return Variation("", engine(case.p_tp), engine(case.d_tp))


@dataclass(frozen=True)
class Difference:
    """The first case where the two sides part: both values, and the command that shows ours."""

    case: Case
    vllm: object
    mambaxfer: object

    def to_dict(self) -> dict:
        return {"case": self.case.describe(), "vllm": plain(self.vllm), "mambaxfer": plain(self.mambaxfer),
                "command": self.case.command()}


@dataclass(kw_only=True)
class CaseTally(Tally):
    """One function's comparisons so far (its first difference a ``Difference``)."""

    def record(self, case: Case, vllm, mambaxfer, shown: tuple | None = None) -> bool:
        """Count one case; ``shown``: the values to report when they differ (else the compared ones)."""
        same = vllm == mambaxfer
        if self.count(case.model + (drafted(case.speculative) if case.speculative else ""), same):
            self.first = Difference(case, *(shown or (vllm, mambaxfer)))
        return same


def qsa_shown(rings: list, keys: list, groups: list[dict[str, list[int]]]) -> dict:
    """Qwen4Exp's QSA caches as both sides give them: each distinct ring (tokens, page bytes) and
    compressed-key page (tokens per key, page bytes), and each group's layers by cache kind."""
    return {"ring (tokens, page bytes)": [list(r) for r in rings],
            "compressed keys (tokens per key, page bytes)": [list(k) for k in keys], "groups": groups}


def pairings(tp_sizes: Iterable[int]) -> list[tuple[int, int]]:
    """Every P/D pairing of these TP sizes where one divides the other (vLLM refuses the rest)."""
    sizes = sorted(set(tp_sizes))
    return [(p, d) for p, d in itertools.product(sizes, sizes) if max(p, d) % min(p, d) == 0]


@dataclass(frozen=True)
class ReplaySSMSetting:
    """One engine started with --use-replayssm: the settings ``validate_mamba_cached_kernel`` reads."""

    num_spec: int = 0
    backend: str = "triton"
    buffer_len: int = 16
    prefix_caching: bool = True
    dtype: str | None = None          # --dtype (None: the model's)
    pipeline: int = 1
    stochastic_rounding: bool = False
    v1_runner: bool = False           # VLLM_USE_V2_MODEL_RUNNER=0 (vLLM 0.33 only has Model Runner V1)

    def engine(self) -> HashedEngine:
        """The engine's serve line, as a preflight reads it."""
        extra = ["--use-replayssm"]
        for flag, value, default in (("--mamba-backend", self.backend, "triton"),
                                     ("--replayssm-buffer-len", self.buffer_len, 16), ("-pp", self.pipeline, 1)):
            if value != default:
                extra += [flag, str(value)]
        if self.stochastic_rounding:
            extra.append("--enable-mamba-cache-stochastic-rounding")
        return HashedEngine(dtype=self.dtype, prefix_caching=self.prefix_caching,
                            speculative=("mtp", self.num_spec) if self.num_spec else None,
                            env=("VLLM_USE_V2_MODEL_RUNNER=0",) if self.v1_runner else (), extra=tuple(extra))

    def variation(self) -> Variation:
        engine = self.engine()
        return Variation(" ".join([*engine.env[:1], *engine.serve_words("kv_producer")[2:]]) + " on both", engine,
                         engine)


def replayssm_settings(supported: bool, model_runner_v1: bool) -> tuple[ReplaySSMSetting, ...]:
    """Every combination of the settings ``validate_mamba_cached_kernel``'s checks read (one default engine
    where the class does not support ReplaySSM); ``model_runner_v1``: the release still has it."""
    if not supported:
        return (ReplaySSMSetting(),)
    return tuple(ReplaySSMSetting(*values) for values in itertools.product(
        (0, 2), ("triton", "flashinfer", "cpu"), (16, 2, 17), (True, False), (None, "float16"), (1, 2), (False, True),
        (False, True) if model_runner_v1 else (False,)))
