"""The published JSON Schema of the plan document."""

from __future__ import annotations

import json
from pathlib import Path

PLAN_SCHEMA_PATH = Path(__file__).parent / "plan-v1.schema.json"


def plan_schema() -> dict:
    return json.loads(PLAN_SCHEMA_PATH.read_text())
