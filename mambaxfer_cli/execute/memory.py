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
        self._shapes = memory.region_shapes
        self._whole: Any = None
        self._buffers: list[Any] = []
        self.addresses: list[int] = []
        if memory.single_region:
            self._one_buffer()
        elif device == "cuda":
            import torch

            torch.cuda.set_device(dev_id)
            self._buffers = [torch.empty(rows * cols, dtype=torch.uint8, device=f"cuda:{dev_id}")
                             for rows, cols in self._shapes]
            self.addresses = [t.data_ptr() for t in self._buffers]
        else:
            self._buffers = [self._aligned(rows * cols) for rows, cols in self._shapes]
            self.addresses = [b.ctypes.data for b in self._buffers]

    def _one_buffer(self) -> None:
        """Every tensor a slice of one allocation, registered as one region (bench's memory)."""
        sizes = [rows * cols for rows, cols in self._shapes]
        if self.device == "cuda":
            import torch

            torch.cuda.set_device(self.dev_id)
            self._whole = torch.empty(sum(sizes), dtype=torch.uint8, device=f"cuda:{self.dev_id}")
            base = self._whole.data_ptr()
        else:
            self._whole = self._aligned(sum(sizes))
            base = self._whole.ctypes.data
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        self._buffers = [self._whole[s:s + n] for s, n in zip(starts, sizes)]
        self.addresses = [base + s for s in starts]

    @staticmethod
    def _aligned(size: int) -> np.ndarray:
        raw = np.empty(size + ALIGN, dtype=np.uint8)
        skip = -raw.ctypes.data % ALIGN
        return raw[skip:skip + size]

    @property
    def mem_type(self) -> str:
        return "VRAM" if self.device == "cuda" else "DRAM"

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
