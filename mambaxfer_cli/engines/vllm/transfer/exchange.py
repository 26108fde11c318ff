"""What a vLLM rank does with its agent before D reads: P fills its pages and publishes its layout; D
checks each source's layout against its plan and loads its metadata (one host: over P's side channel)."""

from __future__ import annotations

from functools import partial
from typing import Any

from mambaxfer_cli.engines.vllm.transfer.tasks import DecodeTask, PrefillTask
from mambaxfer_cli.execute.agent import RankAgent, Tick
from mambaxfer_cli.execute.channel import Channel, RankFailure
from mambaxfer_cli.execute.memory import RankMemory
from mambaxfer_cli.execute.side_channel import fetch_peers
from mambaxfer_cli.proof.pattern import fill_page


def fill(task: PrefillTask, memory: RankMemory, tick: Tick = lambda detail: None) -> None:
    """Every page of a P rank: the pattern of what it holds (an SSM state, attention kernel blocks, or
    one of Qwen4Exp's whole pages)."""
    regions = len(task.memory.region_shapes)
    pages = regions * task.memory.logical_blocks
    for tensor in range(regions):
        host = memory.host(tensor)
        for block in range(task.memory.logical_blocks):
            fill_page(host[block], task.pages[tensor][block], tensor, block)
            tick(f"page {tensor * task.memory.logical_blocks + block + 1} of {pages}")
        memory.store(tensor, host)
    memory.sync()


def layout(task: PrefillTask, memory: RankMemory) -> dict[str, Any]:
    """What a P rank publishes besides its agent metadata: its registered regions and layout."""
    return {"agent": task.agent, "rank": task.rank, "mem_type": memory.mem_type, "dev_id": task.dev_id,
            "bases": memory.bases, "page_bytes": task.memory.page_bytes,
            "logical_blocks": task.memory.logical_blocks,
            "side_page_bytes": list(task.memory.side_page_bytes),
            "conv_bytes": task.layout.conv_bytes, "ssm_bytes": task.layout.ssm_bytes,
            "regions": [[address, length] for address, length, _, _ in memory.regions]}


def check_layout(task: DecodeTask, p_rank: int, published: dict[str, Any]) -> None:
    """What a P rank published against what this D rank's plan expects of it."""
    want = task.prefill_memory
    rank_layout = task.prefill_layouts[p_rank]
    expected = {"rank": p_rank, "page_bytes": want.page_bytes, "logical_blocks": want.logical_blocks,
                "side_page_bytes": list(want.side_page_bytes), "conv_bytes": rank_layout.conv_bytes,
                "ssm_bytes": rank_layout.ssm_bytes}
    for key, value in expected.items():
        if published.get(key) != value:
            raise RankFailure(f"P{p_rank} publishes {key}={published.get(key)}, the plan expects {value}")
    if len(published.get("bases", ())) != len(want.region_shapes):
        raise RankFailure(f"P{p_rank} publishes a different number of registered regions than the plan's")


def exchange(task: DecodeTask, ch: Channel, node: RankAgent) -> dict[int, tuple[str, dict[str, Any]]]:
    """One host: each source P rank's agent name and layout, asked on its side channel."""
    return dict(zip(task.sources, fetch_peers(task, ch, node, "P", task.sources, partial(check_layout, task))))
