"""An engine's block geometry as vLLM 0.33 derives it from the model, the TP size and its flags.

A hybrid engine does not choose its pages: the attention page (``block_size · a1`` bytes) must
hold one request's SSM state, so vLLM raises the block size until it does and pads the SSM state
to exactly that page; the attention backend then picks the kernel block it runs on. An SSM-only
engine keeps the state as its page.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mambaxfer_cli.planning.dtypes import canonical_dtype, dtype_bytes
from mambaxfer_cli.errors import UserError

DEFAULT_BACKEND = "FLASH_ATTN"
DEFAULT_BLOCK_SIZE = 16
MAX_BLOCK_SIZE = 1 << 20          # tokens: far above any block vLLM builds


@dataclass(frozen=True)
class Backend:
    """The kernel block sizes (tokens) an attention backend runs on."""

    name: str
    multiple_of: int = 0                 # any multiple of this, or
    sizes: tuple[int, ...] = ()          # exactly one of these

    @property
    def smallest(self) -> int:
        return self.multiple_of or min(self.sizes)

    @property
    def step(self) -> int:
        """The granularity of the block sizes vLLM derives for this backend."""
        return self.smallest

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


def backend(name: str) -> Backend:
    found = BACKENDS.get(str(name).strip().upper())
    if found is None:
        raise UserError(f"unknown attention backend '{name}'; choose one of: {', '.join(BACKENDS)}")
    return found


KV_CACHE_DTYPES = {"auto": None, "bfloat16": "bfloat16", "float16": "float16", "half": "float16",
                   "float32": "float32", "fp8": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn",
                   "fp8_e5m2": "float8_e5m2", "fp8_inc": "float8_e4m3fn", "fp8_ds_mla": "float8_e4m3fn"}


def kv_cache_dtype(name: str, model_dtype: str) -> str:
    """The element type of the attention cache: ``auto`` is the model's dtype."""
    key = str(name).strip().lower()
    if key not in KV_CACHE_DTYPES:
        raise UserError(f"unknown --kv-cache-dtype '{name}'; choose one of: {', '.join(KV_CACHE_DTYPES)}")
    return canonical_dtype(KV_CACHE_DTYPES[key] or model_dtype)


@dataclass(frozen=True)
class EngineFlags:
    """One engine's flags that shape its blocks (vLLM's serve flags), and its number of blocks."""

    attention_backend: str = DEFAULT_BACKEND
    block_size: int = DEFAULT_BLOCK_SIZE
    kv_cache_dtype: str = "auto"
    prefix_caching: bool = True
    num_blocks: int = 100_000                 # kernel blocks (N): GPU memory decides them
    blocks_per_logical: int | None = None     # expert override: not what vLLM builds

    def __post_init__(self) -> None:
        backend(self.attention_backend)
        if isinstance(self.block_size, bool) or not isinstance(self.block_size, int) \
                or not 1 <= self.block_size <= MAX_BLOCK_SIZE:
            raise UserError(f"--block-size must be an integer from 1 to {MAX_BLOCK_SIZE} tokens, "
                            f"got {self.block_size!r}")
        if self.blocks_per_logical is not None and self.blocks_per_logical < 1:
            raise UserError("--blocks-per-logical must be >= 1")


@dataclass(frozen=True)
class Geometry:
    """What one engine's blocks are: docs/reference.md §6, per engine."""

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

    @property
    def logical_blocks(self) -> int:
        return self.num_blocks // self.blocks_per_logical

    @property
    def kernel_block_bytes(self) -> int:
        return self.page_bytes // self.blocks_per_logical

    def to_dict(self) -> dict:
        return {"attention_backend": self.attention_backend, "kv_cache_dtype": self.kv_cache_dtype,
                "prefix_caching": self.prefix_caching, "block_size": self.block_size,
                "kernel_block_size": self.kernel_block_size, "blocks_per_logical": self.blocks_per_logical,
                "attention_bytes_per_token": self.attention_bytes_per_token,
                "state_bytes": self.state_bytes, "page_bytes": self.page_bytes,
                "num_blocks": self.num_blocks, "vllm_derived": not self.overridden}


def attention_bytes_per_token(kv_heads: int, head_size: int, dtype: str) -> int:
    """``FullAttentionSpec(block_size=1).page_size_bytes``: K and V of one token (head_size_v = head_size)."""
    return kv_heads * 2 * head_size * dtype_bytes(dtype)


# With prefix caching vLLM 0.33 keeps GDN prefill checkpoints on block boundaries: FlashInfer's GDN
# prefill kernel (the one Hopper GPUs run) exports them every 64 tokens (FLASHINFER_GDN_CHECKPOINT_ALIGNMENT).
GDN_CHECKPOINT_ALIGNMENT = 64


def hybrid_block_size(state_bytes: int, a1: int, requested: int, kernel: Backend, alignment: int = 1) -> int:
    """``_align_hybrid_block_size``: the smallest block (a multiple of the backend's step, at
    least the requested size) whose attention page holds the SSM state."""
    kba = math.lcm(max(kernel.smallest, requested), alignment)
    tokens = kba * math.ceil(state_bytes / (kba * a1))
    tokens = -(-tokens // kernel.step) * kernel.step
    return max(requested, tokens)


def derive(state_bytes: int, a1: int | None, flags: EngineFlags, checkpoint_alignment: int = 1) -> Geometry:
    """One engine's geometry from its SSM state bytes ``m``, its attention bytes per token ``a1``
    (None for an SSM-only model), its flags and, with prefix caching, its SSM layers' prefill
    checkpoint alignment in tokens."""
    kernel = backend(flags.attention_backend)
    if a1 is None:
        return Geometry(kernel.name, flags.kv_cache_dtype, flags.prefix_caching, flags.block_size,
                        flags.block_size, 1, None, state_bytes, state_bytes, flags.num_blocks)
    alignment = checkpoint_alignment if flags.prefix_caching else 1
    block = hybrid_block_size(state_bytes, a1, flags.block_size, kernel, alignment)
    if block > MAX_BLOCK_SIZE:
        raise UserError(f"the SSM state ({state_bytes} bytes) needs attention blocks of {block} tokens, "
                        f"more than any engine builds")
    kernel_tokens = kernel.kernel_for(block)
    per_logical = block // kernel_tokens
    derived = per_logical
    overridden = flags.blocks_per_logical is not None and flags.blocks_per_logical != per_logical
    if overridden:
        per_logical = flags.blocks_per_logical
        if block % per_logical:
            raise UserError(f"--blocks-per-logical {per_logical} does not divide the block of {block} tokens")
        kernel_tokens = block // per_logical
    return Geometry(kernel.name, flags.kv_cache_dtype, flags.prefix_caching, block, kernel_tokens,
                    per_logical, a1, state_bytes, block * a1, flags.num_blocks, overridden, derived)
