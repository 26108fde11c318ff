"""``--device auto|cpu|cuda``: where the ranks' memory lives, decided without importing torch here."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

from mambaxfer_cli.errors import UserError

PROBE_TIMEOUT = 60


def _torch_cuda_build() -> str | None:
    """torch's CUDA version as built (None for a CPU build or no torch), read from its version.py."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    namespace: dict[str, Any] = {}
    try:
        exec(compile((Path(spec.origin).parent / "version.py").read_text(), "torch/version.py", "exec"), namespace)
    except (OSError, SyntaxError, ImportError):
        return None
    cuda = namespace.get("cuda")
    return cuda if isinstance(cuda, str) else None


def visible_gpus() -> int:
    """CUDA GPUs torch sees (asked in a subprocess, so that this process never imports torch)."""
    if _torch_cuda_build() is None:
        return 0
    try:
        probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                               capture_output=True, text=True, timeout=PROBE_TIMEOUT)
        return int(probe.stdout.strip() or 0) if probe.returncode == 0 else 0
    except (subprocess.TimeoutExpired, ValueError, OSError):
        return 0


def resolve_device(requested: str) -> tuple[str, int]:
    """("cpu", 0) for DRAM, or ("cuda", number of GPUs) for VRAM."""
    if requested == "cpu":
        return "cpu", 0
    gpus = visible_gpus()
    if requested == "cuda" and gpus == 0:
        build = _torch_cuda_build()
        why = ("torch is a CPU build or not installed" if build is None
               else f"torch (CUDA {build}) sees no GPU")
        raise UserError(f"--device cuda: no CUDA GPU available ({why}); use --device cpu for DRAM over UCX")
    return ("cuda", gpus) if gpus else ("cpu", 0)
