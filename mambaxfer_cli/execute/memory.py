"""A rank's registered memory, one region per KV-cache tensor: DRAM (numpy) or VRAM (torch, staged
through host copies).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mambaxfer_cli.execute.tasks import Memory
from mambaxfer_cli.proof.pattern import POISON

ALIGN = 4096       # bytes: host memory starts on a page boundary


class RankMemory:
    """One rank's regions; ``_buffers`` hold numpy arrays (DRAM) or torch tensors (VRAM)."""

    def __init__(self, memory: Memory, device: str, dev_id: int) -> None:
        self.memory = memory
        self.device = device
        self.dev_id = dev_id
        self.mem_type = "VRAM" if device == "cuda" else "DRAM"
        self._shapes = memory.region_shapes
        self._whole: Any = None
        if memory.single_region:       # bench: every tensor a slice of one allocation, one region
            sizes = [rows * cols for rows, cols in self._shapes]
            self._whole, base = self._allocated(sum(sizes))
            starts = [sum(sizes[:i]) for i in range(len(sizes))]
            self._buffers = [self._whole[s:s + n] for s, n in zip(starts, sizes)]
            self.addresses = [base + s for s in starts]
        else:
            allocated = [self._allocated(rows * cols) for rows, cols in self._shapes]
            self._buffers = [buffer for buffer, _ in allocated]
            self.addresses = [address for _, address in allocated]

    def _allocated(self, size: int) -> tuple[Any, int]:
        """``size`` bytes on the rank's device, and their address."""
        if self.device == "cuda":
            import torch

            torch.cuda.set_device(self.dev_id)
            tensor = torch.empty(size, dtype=torch.uint8, device=f"cuda:{self.dev_id}")
            return tensor, tensor.data_ptr()
        raw = np.empty(size + ALIGN, dtype=np.uint8)
        skip = -raw.ctypes.data % ALIGN
        return raw[skip:skip + size], raw.ctypes.data + skip

    @property
    def regions(self) -> list[tuple[int, int, int, str]]:
        """``register_memory`` tuples: (address, length, device, name)."""
        if self.memory.single_region:
            return [(self.addresses[0], self.memory.total_bytes, self.dev_id, "")]
        return [(addr, rows * cols, self.dev_id, "") for addr, (rows, cols) in zip(self.addresses, self._shapes)]

    @property
    def bases(self) -> list[int]:
        return list(self.addresses)

    @property
    def count(self) -> int:
        return len(self._shapes)

    def host(self, index: int) -> np.ndarray:
        """A writable ``(blocks, bytes)`` host array of region ``index``; ``store`` makes it real."""
        rows, cols = self._shapes[index]
        if self.device == "cuda":
            return np.empty((rows, cols), dtype=np.uint8)
        view: np.ndarray = self._buffers[index].reshape(rows, cols)
        return view

    def store(self, index: int, host: np.ndarray) -> None:
        if self.device == "cuda":
            import torch

            self._buffers[index].copy_(torch.from_numpy(host.reshape(-1)))

    def fetch(self, index: int) -> np.ndarray:
        """Region ``index`` as a ``(blocks, bytes)`` host array (a view for DRAM, a copy for VRAM)."""
        rows, cols = self._shapes[index]
        host: np.ndarray = (self._buffers[index].cpu().numpy() if self.device == "cuda"
                            else self._buffers[index]).reshape(rows, cols)
        return host

    def poison(self, value: int = POISON) -> None:
        for buffer in self._buffers:
            if self.device == "cuda":
                buffer.fill_(value)
            else:
                buffer.fill(value)

    def sync(self) -> None:
        """NIXL is not stream-ordered: finish the device's writes before posting a transfer."""
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize(self.dev_id)

    def release(self) -> None:
        self._whole = None
        self._buffers = []
        self.addresses = []
