"""An engine's block geometry as vLLM derives it from the model, the TP size, its flags, its
release and its GPU: the attention page raised to hold one request's SSM state, the state padded
to it, and the kernel block the attention backend picks; an SSM-only engine's page is the state
(docs/reference.md §6)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from mambaxfer_cli.engines.vllm import families
from mambaxfer_cli.errors import Refused, UserError
from mambaxfer_cli.planning.dtypes import canonical_dtype, dtype_bytes
from mambaxfer_cli.engines.vllm.gpu import (
    DEFAULT_GPU, Gpu, backend_refusal, default_attention_backend, default_mla_backend, fa4_hd256_kernel,
    flashinfer_large_pages,
)
from mambaxfer_cli.engines.vllm.release import Release
from mambaxfer_cli.engines.vllm.releases import NEWEST

DEFAULT_NUM_BLOCKS = 100_000      # kernel blocks (N): GPU memory decides them
MAX_BLOCK_SIZE = 1 << 20          # tokens: far above any block vLLM builds


@dataclass(frozen=True)
class Backend:
    """The kernel block sizes (tokens) an attention backend runs on."""

    name: str
    multiple_of: int = 0                 # any multiple of this, or
    sizes: tuple[int, ...] = ()          # exactly one of these
    # Where a model's layers run other backends beside this one (GLM-5-Next's indexer and ring):
    # the smallest kernel block of the first non-SSM backend vLLM finds, which
    # _align_hybrid_block_size aligns to, and the LCM of every such backend's smallest kernel
    # block, which it rounds the block up to (0: this backend's own).
    first: int = 0
    align: int = 0

    @property
    def smallest(self) -> int:
        return self.multiple_of or min(self.sizes)

    @property
    def step(self) -> int:
        """The granularity of the block sizes vLLM derives for this backend."""
        return self.align or self.smallest

    def accepts(self, tokens: int) -> bool:
        if self.multiple_of:
            return tokens % self.multiple_of == 0
        return tokens in self.sizes

    def kernel_for(self, block_size: int) -> int:
        """``select_common_block_size``: the block itself if accepted, else the largest accepted
        size dividing it."""
        if self.accepts(block_size):
            return block_size
        fits = [s for s in self.sizes if block_size % s == 0]
        if not fits:
            raise UserError(f"attention backend {self.name} runs on kernel blocks of "
                            f"{self.describe()} tokens, none of which divides a block of {block_size} tokens")
        return max(fits)

    def describe(self) -> str:
        if self.multiple_of:
            return f"any multiple of {self.multiple_of}"
        return ", ".join(map(str, self.sizes))


BACKENDS = {
    "FLASH_ATTN": Backend("FLASH_ATTN", multiple_of=16),
    "TRITON_ATTN": Backend("TRITON_ATTN", multiple_of=16),
    "FLASHINFER": Backend("FLASHINFER", sizes=(16, 32, 64)),
}
# MLA's backends (v1/attention/backends/mla/, get_supported_kernel_block_sizes), for MLA models only.
MLA_BACKENDS = {
    "FLASH_ATTN_MLA": Backend("FLASH_ATTN_MLA", multiple_of=16),
    "TRITON_MLA": Backend("TRITON_MLA", multiple_of=16),
    "FLASHMLA": Backend("FLASHMLA", sizes=(64,)),
    "FLASHINFER_MLA": Backend("FLASHINFER_MLA", sizes=(32, 64)),
    "CUTLASS_MLA": Backend("CUTLASS_MLA", sizes=(128,)),
}
# vLLM's sparse MLA backends mambaxfer models (GLM-5-Next's picks on SM 9.x and 10.x), with their
# kernel blocks (get_supported_kernel_block_sizes: MultipleOf(64), MultipleOf(32)). A dense model
# does not start on one ("non-sparse not supported"), a sparse one on no other.
SPARSE_MLA_BACKENDS = {
    "FLASHINFER_MLA_SPARSE_SM90": Backend("FLASHINFER_MLA_SPARSE_SM90", multiple_of=64),
    "FLASHINFER_MLA_SPARSE": Backend("FLASHINFER_MLA_SPARSE", multiple_of=32),
}


def backend(name: str, mla: bool | None = None) -> Backend:
    """The backend of that name; ``mla``: whether the model's attention is MLA (None: either)."""
    key = str(name).strip().upper()
    found = BACKENDS.get(key) or MLA_BACKENDS.get(key) or SPARSE_MLA_BACKENDS.get(key)
    if found is None:
        raise UserError(f"unknown attention backend '{name}'; choose one of: {', '.join(BACKENDS)} "
                        f"(MLA models: {', '.join(MLA_BACKENDS)}; sparse MLA: {', '.join(SPARSE_MLA_BACKENDS)})")
    if key in SPARSE_MLA_BACKENDS and mla is not None:     # kernel_backend: a model without sparse attention
        raise Refused(f"vLLM does not start this model's engines on {key}: \"Selected backend {key} is not "
                        f"valid for this configuration. Reason: [..., 'non-sparse not supported', ...]\" "
                        f"(get_attn_backend_cls); its sparse MLA backends run "
                        f"{families.gathered('SPARSE_MLA')[0]} only")
    if mla is not None and (key in MLA_BACKENDS) != mla:
        kind, table = ("an MLA", MLA_BACKENDS) if mla else ("a non-MLA", BACKENDS)
        raise Refused(f"attention backend {key} does not run {kind} model's attention; choose one of: "
                        f"{', '.join(table)}")
    return found


FLASHINFER_LARGE_PAGES = (16, 32, 64, 128, 256, 512, 1024)


def kernel_backend(name: str | None, device: Gpu, head_size: int | None, kv_cache: str,
                   q_heads: int | None = None, kv_heads: int | None = None, mla: bool = False) -> Backend:
    """The backend (None: vLLM's pick for the GPU; an MLA one for an MLA model) with its kernel block sizes on
    this GPU (``q_heads``, ``kv_heads``: per rank)."""
    if mla:
        return backend(name or default_mla_backend(device), mla=True)
    found = backend(name or default_attention_backend(device), mla=False if name else None)
    refused = backend_refusal(found.name, device) if name else None
    if refused:
        raise Refused(refused)
    if found.name == "FLASH_ATTN":
        fixed = fa4_hd256_kernel(device, head_size, quantized_kv=str(kv_cache).strip().lower().startswith("fp8"))
        if fixed:
            return Backend(found.name, sizes=(fixed,))
    if found.name == "FLASHINFER" and flashinfer_large_pages(device, q_heads, kv_heads):
        return Backend(found.name, sizes=FLASHINFER_LARGE_PAGES)
    return found


KV_CACHE_DTYPES = {"auto": None, "bfloat16": "bfloat16", "float16": "float16", "half": "float16",
                   "float32": "float32", "fp8": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn",
                   "fp8_e5m2": "float8_e5m2", "fp8_inc": "float8_e4m3fn", "fp8_ds_mla": "float8_e4m3fn"}


def kv_cache_dtype(name: str, model_dtype: str) -> str:
    """The element type of the attention cache: ``auto`` is the model's dtype."""
    key = str(name).strip().lower()
    if key not in KV_CACHE_DTYPES:
        raise UserError(f"unknown KV-cache dtype '{name}'; choose one of: {', '.join(KV_CACHE_DTYPES)}")
    return canonical_dtype(KV_CACHE_DTYPES[key] or model_dtype)


@dataclass(frozen=True)
class EngineFlags:
    """One engine as it is started: the vLLM release it runs, its GPU, the serve flags that shape
    its blocks, and its number of blocks."""

    attention_backend: str | None = None      # None: vLLM's pick for the GPU
    block_size: int | None = None             # None: the release's default (--block-size absent)
    kv_cache_dtype: str = "auto"
    prefix_caching: bool = True
    gdn_prefill_backend: str | None = None    # None: vLLM's choice for the GPU
    num_blocks: int = DEFAULT_NUM_BLOCKS
    blocks_per_logical: int | None = None     # expert override: not what vLLM builds
    dcp_size: int = 1                         # --decode-context-parallel-size
    release: Release = NEWEST
    gpu: Gpu = DEFAULT_GPU

    def __post_init__(self) -> None:
        if self.attention_backend is not None:
            backend(self.attention_backend)
        if self.block_size is not None and (isinstance(self.block_size, bool) or not isinstance(self.block_size, int)
                                            or not 1 <= self.block_size <= MAX_BLOCK_SIZE):
            raise UserError(f"the block size must be an integer from 1 to {MAX_BLOCK_SIZE} tokens, "
                            f"got {self.block_size!r}")
        if self.blocks_per_logical is not None and self.blocks_per_logical < 1:
            raise UserError("kernel blocks per logical block must be >= 1")

    @property
    def requested_block_size(self) -> int:
        """The block size vLLM starts from: the flag, else the release's default."""
        return self.release.default_block_size if self.block_size is None else self.block_size


@dataclass(frozen=True)
class Geometry:
    """What one engine's blocks are, as its release derives them on its GPU."""

    attention_backend: str
    kv_cache_dtype: str                  # as given: auto, fp8, ...
    prefix_caching: bool
    block_size: int                      # logical block, tokens
    kernel_block_size: int               # tokens
    blocks_per_logical: int
    attention_bytes_per_token: int | None  # a1, per layer and rank; None without attention
    state_bytes: int                     # m: one request's SSM state of one layer on one rank
    page_bytes: int                      # one logical block of one KV-cache tensor
    num_blocks: int                      # N, kernel blocks
    overridden: bool = False             # blocks per logical block given by hand
    derived_blocks_per_logical: int = 1  # what vLLM derives (differs only when overridden)
    release: str = NEWEST.name           # the vLLM release that derives it
    gpu: str = DEFAULT_GPU.name
    gdn_prefill_backend: str | None = None   # the GDN prefill kernel (GDN models)
    checkpoint_alignment: int = 1        # tokens the blocks align to for prefill checkpoints
    split_by_remote: int = 1             # >1: the pulling engine views each kernel block as this many

    @property
    def logical_blocks(self) -> int:
        return self.num_blocks // self.blocks_per_logical

    @property
    def kernel_block_bytes(self) -> int:
        return self.page_bytes // self.blocks_per_logical

    def to_dict(self) -> dict[str, Any]:
        """Every field in order but the derived blocks per logical; ``vllm_derived``: not overridden."""
        fields = {**vars(self), "overridden": not self.overridden}
        del fields["derived_blocks_per_logical"]
        names = {"overridden": "vllm_derived", "release": "vllm_version"}
        return {names.get(name, name): value for name, value in fields.items()}


def attention_bytes_per_token(kv_heads: int, head_size: int, dtype: str, mla: bool = False) -> int:
    """``FullAttentionSpec(block_size=1).page_size_bytes``: K and V of one token (head_size_v =
    head_size); ``MLAAttentionSpec``'s (``head_size_v = 0``): the latent vector alone."""
    return kv_heads * (1 if mla else 2) * head_size * dtype_bytes(dtype)


MLA_HYBRID_ALIGNMENT = 128     # tokens: _align_hybrid_block_size's floor for MLA hybrids


def hybrid_block_size(state_bytes: int, a1: int, requested: int, kernel: Backend, alignment: int = 1,
                      mla: bool = False) -> int:
    """``_align_hybrid_block_size``: the smallest block (in the backend's steps, at least the requested size,
    a multiple of ``alignment``) whose attention page holds the SSM state."""
    kba = math.lcm(max(kernel.first or kernel.smallest, requested, MLA_HYBRID_ALIGNMENT if mla else 1), alignment)
    tokens = kba * math.ceil(state_bytes / (kba * a1))
    tokens = -(-tokens // kernel.step) * kernel.step
    return max(requested, tokens)


def derive(state_bytes: int, a1: int | None, flags: EngineFlags, checkpoint_alignment: int = 1,
           kernel: Backend | None = None, gdn_prefill_backend: str | None = None, mla: bool = False) -> Geometry:
    """One engine's geometry from its SSM state bytes, its attention bytes per token ``a1`` (None: SSM-only),
    its flags, its prefill checkpoint alignment (with prefix caching) and its backend's kernel blocks."""
    kernel = kernel or kernel_backend(flags.attention_backend, flags.gpu, None, flags.kv_cache_dtype)
    requested = flags.requested_block_size
    # SSM-only: one kernel block of the requested size per logical block, whose page is the state
    block, kernel_tokens, per_logical, derived, alignment, overridden = requested, requested, 1, 1, 1, False
    if a1 is not None:
        alignment = checkpoint_alignment if flags.prefix_caching else 1
        block = hybrid_block_size(state_bytes, a1, requested, kernel, alignment, mla)
        if block > MAX_BLOCK_SIZE:
            raise UserError(f"the SSM state ({state_bytes} bytes) needs attention blocks of {block} tokens, "
                            f"more than any engine builds")
        kernel_tokens = kernel.kernel_for(block)
        per_logical = block // kernel_tokens
        derived = per_logical
        wanted = flags.blocks_per_logical
        overridden = wanted is not None and wanted != per_logical
        if wanted is not None and overridden:
            per_logical = wanted
            if block % per_logical:
                raise UserError(f"{per_logical} kernel blocks per logical block do not divide the block of "
                                f"{block} tokens")
            kernel_tokens = block // per_logical
    return Geometry(kernel.name, flags.kv_cache_dtype, flags.prefix_caching, block, kernel_tokens, per_logical, a1,
                    state_bytes, state_bytes if a1 is None else block * a1, flags.num_blocks, overridden, derived,
                    release=flags.release.name, gpu=flags.gpu.spec, gdn_prefill_backend=gdn_prefill_backend,
                    checkpoint_alignment=alignment)
