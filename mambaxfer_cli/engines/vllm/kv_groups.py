"""vLLM's KV-cache groups and shared tensors (``_get_kv_cache_groups_uniform_page_size``)."""

from __future__ import annotations

import math
import re
from itertools import groupby
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from mambaxfer_cli.engines.vllm import families
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.limits import MAX_KV_GROUPS
from mambaxfer_cli.planning.model import ATTENTION, SSM, ModelSpec

# Group kinds, never layer kinds: an indexer's rings (a CircularBufferSpec group, attention-kind IDs)
# and Qwen4Exp's PLE state (a tp_replicated MambaSpec group: one ID after the SSM ones); their pages
# are moved apart.
RING, PLE = "ring", "ple"
DRAFT = "draft"     # a bucket of a drafter's layers whose pages are not the target's


@dataclass(frozen=True)
class KVGrouping:
    groups: tuple[str, ...]                  # kind of each group, in order
    tensors: int                             # KV-cache tensors of the engine (R)
    ssm_tensors: int                         # tensors that hold SSM layers (S)
    members: tuple[tuple[int, ...], ...] = ()  # model layer indices of each group (derived only)

    def tensors_of(self, kind: str) -> int:
        """The tensors that can hold a layer of this kind: all of them, or the SSM ones."""
        return self.ssm_tensors if kind == SSM else self.tensors

    def layers_in(self, group: int) -> int | None:
        """How many layers group ``group`` holds; None for a grouping given by hand (taken as full)."""
        return len(self.members[group]) if self.members else None


def model_grouping(model: ModelSpec) -> KVGrouping:
    """vLLM's grouping of ``model``'s layers; the caches a family registers beside a layer, and a
    drafter's layers of other pages (attention-kind), are buckets of their own."""
    beside = families.first("kv_caches", model) or {}
    if not model.draft_attention:
        return vllm_grouping(model.layers, beside)
    target = len(model.layers) - model.draft_layers
    found = vllm_grouping(model.layers[:target] + (DRAFT,) * model.draft_layers, beside)
    return replace(found, groups=tuple(ATTENTION if kind == DRAFT else kind for kind in found.groups))


def vllm_grouping(layers: Sequence[str], beside: Mapping[int, Sequence[str]] = {}) -> KVGrouping:
    """Buckets by type in order of first registration (``beside[i]``: layer i's kinds); G = the smallest
    but the PLE's (or the largest, when < 1.5·smallest); n layers make ceil(n/G) groups, i mod that."""
    buckets: dict[str, list[int]] = {}
    for index, kind in enumerate(layers):
        for each in beside.get(index, (kind,)):
            buckets.setdefault(each, []).append(index)
    sizes = [len(b) for kind, b in buckets.items() if kind != PLE]
    smallest, largest = min(sizes), max(sizes)
    size = largest if largest < 1.5 * smallest else smallest
    kinds, members = [], []
    for kind, indices in buckets.items():
        n_groups = math.ceil(len(indices) / size)
        for g in range(n_groups):
            kinds.append(kind)
            members.append(tuple(indices[g::n_groups]))
    ssm_tensors = max(len(m) for k, m in zip(kinds, members) if k == SSM)
    return KVGrouping(tuple(kinds), size, ssm_tensors, tuple(members))


_ITEM = re.compile(r"^(attention|ssm)(?:\*(\d+))?$")


def parse_grouping(text: str, tensors: int | None, ssm_tensors: int | None) -> KVGrouping:
    """``--kv-groups 'ssm*7,attention'`` with ``--kv-tensors 4``: a grouping given by hand."""
    kinds: list[str] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        match = _ITEM.match(item)
        if not match:
            raise UserError(f"--kv-groups: bad item '{item}'; write e.g. 'ssm*7,attention'")
        count = int(match.group(2) or 1) if len(match.group(2) or "") <= 6 else MAX_KV_GROUPS + 1
        if len(kinds) + count > MAX_KV_GROUPS:
            raise UserError(f"--kv-groups: more than {MAX_KV_GROUPS} groups, more than any model's layers")
        kinds.extend([match.group(1)] * count)
    if SSM not in kinds:
        raise UserError("--kv-groups must name at least one ssm group")
    if tensors is None:
        raise UserError("--kv-groups needs --kv-tensors (the number of KV-cache tensors)")
    if tensors < 1 or (ssm_tensors is not None and not 1 <= ssm_tensors <= tensors):
        raise UserError("--kv-tensors must be >= 1 and --ssm-tensors between 1 and --kv-tensors")
    return KVGrouping(tuple(kinds), tensors, ssm_tensors or tensors)


def describe(grouping: KVGrouping) -> str:
    runs = [(kind, len(list(group))) for kind, group in groupby(grouping.groups)]
    return ",".join(f"{kind}*{count}" if count > 1 else kind for kind, count in runs)
