"""Every rank's slice of one SSM layer's state: shards in global units, byte offsets, sizes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mambaxfer_cli.planning.dtypes import dtype_bytes
from mambaxfer_cli.errors import Refused, UserError
from mambaxfer_cli.planning.model import ModelSpec
from mambaxfer_cli.planning.startup import parallel_refusal
from mambaxfer_cli.planning.variants import VARIANTS, RegionShape

MAX_LISTED_TP = 64


@dataclass(frozen=True)
class Shard:
    """A contiguous range of global units, end exclusive."""

    start: int
    end: int

    def __len__(self) -> int:
        return self.end - self.start

    def intersect(self, other: "Shard") -> "Shard | None":
        start, end = max(self.start, other.start), min(self.end, other.end)
        return Shard(start, end) if start < end else None


@dataclass(frozen=True)
class Region:
    name: str
    kind: str
    unit: str
    unit_bytes: int
    shard: Shard
    offset: int
    own: bool = False          # a state tensor of its own (its ``RegionShape.rows``)

    @property
    def size(self) -> int:
        return len(self.shard) * self.unit_bytes

    @property
    def end(self) -> int:
        return self.offset + self.size

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "unit": self.unit, "unit_bytes": self.unit_bytes,
                "shard": [self.shard.start, self.shard.end], "offset": self.offset, "size": self.size}


@dataclass(frozen=True)
class RankLayout:
    rank: int
    tp: int
    conv_rows: int
    regions: tuple[Region, ...]

    @property
    def conv_bytes(self) -> int:
        return sum(r.size for r in self.regions if r.kind == "conv")

    @property
    def ssm_bytes(self) -> int:
        return sum(r.size for r in self.regions if r.kind == "ssm")

    @property
    def state_bytes(self) -> int:
        return self.conv_bytes + self.ssm_bytes

    @property
    def sub_projection_dims(self) -> tuple[int, ...]:
        return tuple(len(r.shard) for r in self.regions if r.kind == "conv")

    def region(self, name: str) -> Region:
        return next(r for r in self.regions if r.name == name)

    def region_at(self, offset: int) -> Region | None:
        return next((r for r in self.regions if r.offset <= offset < r.end), None)

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "conv_rows": self.conv_rows, "conv_bytes": self.conv_bytes,
                "ssm_bytes": self.ssm_bytes, "regions": [r.to_dict() for r in self.regions]}


def _shard(shape: RegionShape, model: ModelSpec, tp: int, rank: int) -> Shard:
    units, groups = shape.units(model.params), shape.groups(model.params)
    if groups % tp == 0:
        per_rank = units // tp
        return Shard(rank * per_rank, (rank + 1) * per_rank)
    if shape.replicable and groups == 1:
        return Shard(0, units)
    why = (", and vLLM replicates B/C groups only when n_groups == 1 (padding to n_eff = TP)" if shape.replicable
           else f" ({model.variant.value} '{shape.name}' {shape.unit}s)")
    raise Refused(f"{model.name}: TP {tp} does not divide {shape.dim} = {groups}{why}; "
                  f"TP sizes that work: {tp_sizes_that_work(model)}")


def tp_sizes_that_work(model: ModelSpec) -> str:
    return ", ".join(map(str, valid_tp_sizes(model))) or "none"


def _tp_fits(model: ModelSpec, tp: int) -> bool:
    for shape in VARIANTS[model.variant].regions:
        groups = shape.groups(model.params)
        if groups % tp and not (shape.replicable and groups == 1):
            return False
    heads = model.num_kv_heads
    if parallel_refusal(model, tp):   # no engine starts it: the attention's asserts
        return False
    return heads is None or heads % tp == 0 or tp % heads == 0


def valid_tp_sizes(model: ModelSpec, limit: int = MAX_LISTED_TP) -> list[int]:
    return [tp for tp in range(1, limit + 1) if _tp_fits(model, tp)]


def check_tp(tp: object) -> int:
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise UserError(f"TP size must be a positive integer, got {tp!r}")
    return tp


def rank_layout(model: ModelSpec, tp: int, rank: int) -> RankLayout:
    """The state of one SSM layer on rank ``rank`` of a TP-``tp`` engine."""
    check_tp(tp)
    rows = model.conv_rows
    if rows < 1 and any(shape.kind == "conv" for shape in VARIANTS[model.variant].regions):
        raise UserError(f"{model.name}: conv_kernel {model.conv_kernel} leaves no conv state rows")
    conv_unit = rows * dtype_bytes(model.conv_dtype)
    regions, offset = [], 0
    for shape in VARIANTS[model.variant].regions:
        shard = _shard(shape, model, tp, rank)
        if shape.kind == "conv":
            unit_bytes = shape.rows(model.params) * dtype_bytes(model.conv_dtype) if shape.rows else conv_unit
        else:
            assert shape.unit_elements is not None, f"{shape.name}: a temporal region counts its elements"
            unit_bytes = shape.unit_elements(model.params) * dtype_bytes(model.ssm_dtype)
        region = Region(shape.name, shape.kind, shape.unit, unit_bytes, shard, offset, shape.rows is not None)
        regions.append(region)
        offset = region.end
    return RankLayout(rank, tp, rows, tuple(regions))


def kv_head_shard(model: ModelSpec, tp: int, rank: int) -> Shard | None:
    """Attention KV heads held by a rank (vLLM: sharded, or replicated when TP > heads)."""
    heads = model.num_kv_heads
    if heads is None:
        return None
    if heads % tp == 0:
        per = heads // tp
        return Shard(rank * per, (rank + 1) * per)
    if tp % heads == 0:
        head = rank // (tp // heads)
        return Shard(head, head + 1)
    raise Refused(f"{model.name}: TP {tp} and the attention's {heads} KV heads "
                    f"(num_key_value_heads) do not divide one another, so the attention layout does not "
                    f"exist; TP sizes that work: {tp_sizes_that_work(model)}")
