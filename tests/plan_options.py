"""PlanOptions as ``check`` builds them, shared by the tests that plan and prove pairings."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mambaxfer_cli.engines.vllm.geometry import EngineFlags
from mambaxfer_cli.engines.vllm.plan import PlanOptions
from mambaxfer_cli.engines.vllm.release import Release
from mambaxfer_cli.proof import CHECK_NUM_BLOCKS


def check_options(release: Release | None = None, **overrides: Any) -> PlanOptions:
    """PlanOptions with check's engine sizes, for ``release`` (default: EngineFlags')."""
    base = EngineFlags() if release is None else EngineFlags(release=release)
    prefill, decode = (replace(base, num_blocks=CHECK_NUM_BLOCKS[side]) for side in ("prefill", "decode"))
    return replace(PlanOptions(prefill=prefill, decode=decode), **overrides)
