"""The published JSON Schemas of every document mambaxfer emits."""

from __future__ import annotations

import json
from pathlib import Path

SCHEMA_DIR = Path(__file__).parent
# Their schemas: mambaxfer.<name>/v1.
DOCUMENTS = ("plan", "check", "execute", "inspect", "models", "preflight", "bench", "conformance")
PLAN_SCHEMA_PATH = SCHEMA_DIR / "plan-v1.schema.json"


def schema_path(name: str) -> Path:
    return SCHEMA_DIR / f"{name}-v1.schema.json"


def document_schema(name: str) -> dict:
    return json.loads(schema_path(name).read_text())


def plan_schema() -> dict:
    return document_schema("plan")


def bench_schema() -> dict:
    return document_schema("bench")
