"""The GPU an engine runs on, as far as it changes the blocks vLLM builds: the GDN prefill kernel
and FlashAttention 4's head-size-256 kernel blocks (docs/reference.md §6)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from mambaxfer_cli.engines.vllm.releases import NEWEST
from mambaxfer_cli.errors import Refused, UserError
from mambaxfer_cli.planning.model import ModelSpec

DEFAULT_CUDA = NEWEST.cuda   # the newest release's wheels: torch built for CUDA 13.0


@dataclass(frozen=True)
class Gpu:
    name: str
    capability: tuple[int, int]        # compute capability (major, minor)
    cuda: int = DEFAULT_CUDA           # CUDA runtime major version vLLM runs with

    @property
    def sm(self) -> str:
        return f"{self.capability[0]}.{self.capability[1]}"

    @property
    def spec(self) -> str:
        """How ``--gpu`` names it, which ``gpu()`` reads back: ``B200``, ``B200/cu12``."""
        return self.name if self.cuda == DEFAULT_CUDA else f"{self.name}/cu{self.cuda}"

    def describe(self) -> str:
        return f"{self.name} (SM {self.sm}, CUDA {self.cuda})"


# By compute capability: what vLLM tests is the capability, never the product name. Every data
# centre and workstation GPU vLLM's CUDA platform runs (compute capability 7.0 and newer), named
# as nvidia-smi names it after its vendor word.
GPUS = tuple(Gpu(name, capability) for capability, names in (
    ((9, 0), "H100, H200, H20, H800, GH200"),
    ((8, 0), "A100, A800, A30"),
    ((8, 6), "A10, A10G, A40, A16, A2, RTX A6000, RTX A5000, RTX A4000, RTX 3090, RTX 3090 Ti, RTX 3080"),
    ((8, 9), "L4, L40, L40S, L20, RTX 6000 Ada, RTX 4090, RTX 4080"),
    ((10, 0), "B200, GB200"), ((10, 3), "B300, GB300"),
    ((12, 0), "RTX PRO 6000, RTX 5090, RTX 5080"),
    ((7, 5), "T4, RTX 8000, RTX 6000, RTX 2080 Ti"),
    ((7, 0), "V100, V100S, TITAN V"),
) for name in names.split(", "))
DEFAULT_GPU = GPUS[0]


def _key(text: str) -> str:
    return re.sub(r"[\s_-]", "", text).upper()


_BY_NAME = {_key(g.name): g for g in GPUS}
_SM = re.compile(r"^(?:SM)?(\d{1,2})(?:\.?(\d))$")


# How nvidia-smi (``nvidia-smi --query-gpu=name``) and cloud instance pages spell a GPU around the
# name in the table: the vendor before it; form factor, memory and interconnect after it.
_VENDOR = {"NVIDIA", "TESLA", "GEFORCE", "QUADRO"}
_SUFFIX = re.compile(r"\d+GB|HBM\d*E?|SXM\d*|PCIE|NVL\d*|MIG\S*|BLACKWELL|SERVER|WORKSTATION|EDITION|MAX|GENERATION"
                     r"|Q|\d+C|\d+G", re.I)
_ROCM = re.compile(r"^(?:AMD)?(?:INSTINCT)?(?:MI\d{2,3}[A-Z]*|RADEON\S*|RX\d+\S*)$")


def _spelled(name: str) -> Gpu | None:
    """A table GPU as nvidia-smi or a cloud page spells it: ``NVIDIA H100 80GB HBM3``,
    ``H100-SXM``, ``a100-80gb`` and ``NVIDIA B200`` read as H100, H100, A100 and B200."""
    words = [w for w in re.split(r"[\s_-]+", name.strip()) if w]
    while words and words[0].upper() in _VENDOR:
        words = words[1:]
    for end in range(len(words), 0, -1):
        found = _BY_NAME.get(_key("".join(words[:end])))
        if found is not None and all(_SUFFIX.fullmatch(w) for w in words[end:]):
            return found
    return None


def gpu(text: str) -> Gpu:
    """``--gpu``: a name from the table (``H100``, ``B200``, ...), or a compute capability
    (``sm90``, ``10.0``); ``/cu12`` after it names the CUDA runtime (13 unless given)."""
    name, _, cuda_text = str(text).strip().partition("/")
    cuda = DEFAULT_CUDA
    if cuda_text:
        match = re.fullmatch(r"(?:cu|cuda)?(\d{2})", cuda_text.strip(), re.I)
        if not match:
            raise UserError(f"GPU '{text}': write the CUDA runtime as /cu12 or /cu13, e.g. B200/cu12")
        cuda = int(match.group(1))
    found = _BY_NAME.get(_key(name)) or _spelled(name)
    if found is not None:
        return Gpu(found.name, found.capability, cuda)
    sm = _SM.match(_key(name))
    if sm and 7 <= int(sm.group(1)) <= 12:
        capability = (int(sm.group(1)), int(sm.group(2)))
        return Gpu(f"SM {capability[0]}.{capability[1]}", capability, cuda)
    if _ROCM.match(_key(name)):
        raise UserError(f"GPU '{text}' is an AMD GPU: mambaxfer models vLLM on NVIDIA GPUs (CUDA) only; "
                        f"ROCm platforms are not modelled")
    raise UserError(f"unknown GPU '{text}'; give it as nvidia-smi --query-gpu=name prints it ('NVIDIA H100 80GB "
                    f"HBM3'), by its name (H100, A100, L40S, RTX 4090, T4, V100, ...) or by its compute capability "
                    f"(sm90, 8.9)")


# --- the GDN prefill kernel ----------------------------------------------------------------------

GDN_CHOICES = ("flashinfer", "triton", "cutedsl")     # the CUDA ones of vLLM's --gdn-prefill-backend
GDN_OTHER_PLATFORMS = ("aiter_flydsl", "sycl", "hip")
FLASHINFER_GDN_CHECKPOINT_ALIGNMENT = 64   # v1/attention/backends/gdn_attn.py


def gdn_prefill_backend(device: Gpu, head_k_dim: int | None, requested: str | None = None) -> str:
    """``_resolve_gdn_prefill_backend`` on CUDA: FlashInfer or CuteDSL where the GPU, the CUDA runtime and
    ``head_k_dim`` allow it (CuteDSL only when asked for), else Triton."""
    choice = "auto" if requested is None else str(requested).strip().lower()
    if choice in GDN_OTHER_PLATFORMS:
        raise Refused(f"GDN prefill backend '{choice}' is not one for NVIDIA GPUs (vLLM refuses to start "
                        f"with it on CUDA); choose one of: {', '.join(GDN_CHOICES)}")
    if choice not in GDN_CHOICES + ("auto",):
        raise UserError(f"unknown GDN prefill backend '{requested}'; choose one of: {', '.join(GDN_CHOICES)}")
    major = device.capability[0]
    blackwell = major in (10, 12) and head_k_dim == 128 and device.cuda >= 13
    flashinfer = device.capability == (9, 0) or blackwell
    cutedsl = major == 10 and head_k_dim == 128 and device.cuda >= 13
    if choice in ("auto", "flashinfer") and flashinfer:
        return "flashinfer"
    if choice == "cutedsl" and cutedsl:
        return "cutedsl"
    return "triton"


def gdn_checkpoint_alignment(backend: str) -> int:
    """Tokens GDN prefill checkpoints fall on, with prefix caching: FlashInfer's kernel exports
    them every 64 tokens; the others none (1)."""
    return FLASHINFER_GDN_CHECKPOINT_ALIGNMENT if backend == "flashinfer" else 1


# --- the attention backend and its kernel blocks -------------------------------------------------

def default_attention_backend(device: Gpu) -> str:
    """The attention backend vLLM picks without ``--attention-backend`` for a causal, non-MLA model
    (``_get_backend_priorities``: the first whose ``supports_compute_capability`` holds)."""
    if device.capability < AMPERE:
        return "TRITON_ATTN"
    return "FLASHINFER" if device.capability[0] == 10 else "FLASH_ATTN"


AMPERE = (8, 0)     # FlashAttention's and FlashInfer's floor, and bfloat16's (CudaPlatform.supported_dtypes)
NOT_BELOW_AMPERE = ("FLASH_ATTN", "FLASHINFER")


def backend_refusal(name: str, device: Gpu) -> str | None:
    """``get_attn_backend_cls`` on a backend named by ``--attention-backend`` that does not run on
    the GPU (FlashAttention and FlashInfer below SM 8.0), in vLLM's words; None where it runs."""
    if device.capability < AMPERE and name in NOT_BELOW_AMPERE:
        return (f"vLLM does not start on {device.describe()} with --attention-backend {name}: \"Selected backend "
                f"AttentionBackendEnum.{name} is not valid for this configuration. Reason: ['compute capability "
                f"not supported']\" (get_attn_backend_cls); TRITON_ATTN runs there")
    return None


def run_dtype(dtype: str, given: bool, device: Gpu) -> str:
    """The model dtype vLLM runs on ``device``: below SM 8.0, ``--dtype auto`` falls back to float16
    (``_resolve_auto_dtype``) and a ``--dtype bfloat16`` given stops every worker."""
    if dtype != "bfloat16" or device.capability >= AMPERE:
        return dtype
    if given:
        raise Refused(f"vLLM does not start on {device.describe()} with --dtype bfloat16: \"Bfloat16 is only "
                      f"supported on GPUs with compute capability of at least 8.0. Your {device.name} GPU has "
                      f"compute capability {device.sm}. You can use float16 instead by explicitly setting the "
                      f"`dtype` flag in CLI, for example: --dtype=half.\" (check_if_supports_dtype)")
    return "float16"


def on_gpu(model: ModelSpec, device: Gpu) -> ModelSpec:
    """The model as vLLM runs it on ``device`` (``run_dtype``): where it falls back to float16, the
    states that follow the model's dtype follow it there."""
    given = model.origin.get("model_dtype") == "--dtype"
    dtype = run_dtype(model.model_dtype, given, device)
    if dtype == model.model_dtype:
        return model
    why = f"{device.name} (SM {device.sm}): no bfloat16, so vLLM's --dtype auto runs {dtype} (_resolve_auto_dtype)"
    origin = dict(model.origin)
    conv = model.conv_dtype == model.model_dtype and origin.get("conv_dtype") == origin.get("model_dtype")
    # the SSM state follows the model's dtype, or the conv state's where that follows it
    ssm = model.ssm_dtype == model.model_dtype and origin.get("ssm_dtype") in (
        origin.get("model_dtype"), *(("the conv dtype",) if conv else ()))
    origin.update({"model_dtype": why, **({"conv_dtype": why} if conv else {}), **({"ssm_dtype": why} if ssm else {})})
    return replace(model, model_dtype=dtype, conv_dtype=dtype if conv else model.conv_dtype,
                   ssm_dtype=dtype if ssm else model.ssm_dtype, origin=origin)


def default_mla_backend(device: Gpu) -> str:
    """The MLA backend vLLM picks without ``--attention-backend`` (``_get_backend_priorities`` with
    ``use_mla``: the first whose ``supports_compute_capability`` holds)."""
    major = device.capability[0]
    return {10: "FLASHINFER_MLA", 9: "FLASH_ATTN_MLA"}.get(major, "TRITON_MLA")


def flashinfer_large_pages(device: Gpu, q_heads: int | None, kv_heads: int | None) -> bool:
    """FlashInfer's trtllm-gen kernel blocks of 128 to 1024 tokens: on SM 10.x for grouped-query attention
    (vLLM also needs their kernels downloadable at start-up; mambaxfer assumes they are)."""
    if device.capability[0] != 10 or not q_heads or not kv_heads:
        return False
    return q_heads // kv_heads > 1 and q_heads % kv_heads == 0


FA4_HD256_PAGE_SIZE = 128


def fa4_hd256_kernel(device: Gpu, head_size: int | None, quantized_kv: bool) -> int | None:
    """The fixed kernel block FLASH_ATTN runs on: FA4 (the default on SM 10.x) has a dedicated
    head-size-256 kernel with one 128-token page per tile; a quantized KV cache falls back to FA2."""
    if device.capability[0] == 10 and head_size == 256 and not quantized_kv:
        return FA4_HD256_PAGE_SIZE
    return None
