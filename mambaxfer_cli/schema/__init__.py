"""The published JSON Schemas of the plan and bench documents."""

from __future__ import annotations

import json
from pathlib import Path

PLAN_SCHEMA_PATH = Path(__file__).parent / "plan-v1.schema.json"
BENCH_SCHEMA_PATH = Path(__file__).parent / "bench-v1.schema.json"


def plan_schema() -> dict:
    return json.loads(PLAN_SCHEMA_PATH.read_text())


def bench_schema() -> dict:
    return json.loads(BENCH_SCHEMA_PATH.read_text())
