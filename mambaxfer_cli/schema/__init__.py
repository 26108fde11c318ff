"""The published JSON Schemas of every document mambaxfer emits.

Where a schema lists the model variants, its file says ``"enum": "$variants"``: the variants are
those of ``planning/variants/``, written in when the schema is read.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

SCHEMA_DIR = Path(__file__).parent
# Their schemas: mambaxfer.<name>/v1.
DOCUMENTS = ("plan", "check", "execute", "inspect", "models", "preflight", "bench", "conformance", "sglang-plan",
             "sglang-check", "sglang-inspect", "sglang-execute", "sglang-bench", "sglang-models",
             "check-engines", "bench-engines")


_VARIANTS = re.compile(r'^( *)"enum": "\$variants"', re.M)


def schema_text(name: str) -> str:
    """The schema as published: its file, with the variants mambaxfer knows written in."""
    from mambaxfer_cli.planning.variants import names

    def listed(match: re.Match[str]) -> str:
        indent = match.group(1)
        items = ",\n".join(f'{indent}  "{name}"' for name in names())
        return f'{indent}"enum": [\n{items}\n{indent}]'

    return _VARIANTS.sub(listed, (SCHEMA_DIR / f"{name}-v1.schema.json").read_text())


def document_schema(name: str) -> dict:
    return json.loads(schema_text(name))
