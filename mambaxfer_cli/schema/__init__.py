"""The published JSON Schemas of every document mambaxfer emits.

Where a schema lists the model variants, its file says ``"enum": "$variants"``: the variants are
those of ``planning/variants/``, written in when the schema is read; so are the codes of a plan's
verdict (``"enum": "$verdict_codes"``, ``engines/vllm/release.py VERDICT_CODES``) and the
attention backends (``"$attention_backends"``, ``engines/vllm/geometry.py``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

SCHEMA_DIR = Path(__file__).parent
# Their schemas: mambaxfer.<name>/v1.
DOCUMENTS = ("plan", "check", "execute", "inspect", "models", "preflight", "bench", "conformance", "sglang-plan",
             "sglang-check", "sglang-inspect", "sglang-execute", "sglang-bench",
             "check-engines", "bench-engines")
PLAN_SCHEMA_PATH = SCHEMA_DIR / "plan-v1.schema.json"


def schema_path(name: str) -> Path:
    return SCHEMA_DIR / f"{name}-v1.schema.json"


_LISTS = re.compile(r'^( *)"enum": "\$(variants|verdict_codes|attention_backends)"', re.M)


def schema_text(name: str) -> str:
    """The schema as published: its file, with the variants mambaxfer knows and the codes of a
    plan's verdict written in."""
    from mambaxfer_cli.engines.vllm.geometry import BACKENDS, MLA_BACKENDS
    from mambaxfer_cli.engines.vllm.release import VERDICT_CODES
    from mambaxfer_cli.planning.variants import names

    def listed(match: re.Match[str]) -> str:
        indent = match.group(1)
        values = {"variants": tuple(names()), "verdict_codes": VERDICT_CODES,
                  "attention_backends": (*BACKENDS, *MLA_BACKENDS)}[match.group(2)]
        items = ",\n".join(f'{indent}  "{value}"' for value in values)
        return f'{indent}"enum": [\n{items}\n{indent}]'

    return _LISTS.sub(listed, schema_path(name).read_text())


def document_schema(name: str) -> dict:
    return json.loads(schema_text(name))


def plan_schema() -> dict:
    return document_schema("plan")


def bench_schema() -> dict:
    return document_schema("bench")
