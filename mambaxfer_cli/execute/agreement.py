"""What the two sides of a two-host run compare before any byte moves, and the NIXL notification
messages that carry it (pure: no NIXL).

Each side plans from its own command line; the geometry is that plan's own document, the
descriptor IDs left out but hashed with everything else, so that any field the plan gains is
compared too. Fields come in the order that names the cause first: the model (its config values
one by one, then their hash), semantics and TP sizes, the engines, then what is derived from them.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from mambaxfer_cli.execute.difference import comparable, first_difference, shown_value
from mambaxfer_cli.engines.vllm.plan import Plan

TAG = b"mambaxfer:"            # marks our control notifications apart from the READs' own
FIRST = ("model", "semantics", "tp", "engines", "vllm", "descriptors")
LEFT_OUT = ("schema", "reads", "warnings")


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def geometry(plan: Plan) -> dict[str, Any]:
    """The compared fields of a plan, in the order they are compared."""
    document = comparable(plan.to_dict())
    model = dict(document["model"])
    model["config_hash"] = _digest(model.get("params"))
    parts = {"model": model, "semantics": document["semantics"],
             "tp": {"prefill": document["prefill"]["tp"], "decode": document["decode"]["tp"]},
             "descriptors": {k: v for k, v in document["descriptors"].items() if k != "reads"}}
    source = {**document, **parts}
    out = {key: source[key] for key in FIRST if key in source}
    out.update({k: v for k, v in document.items() if k not in out and k not in LEFT_OUT})
    out["plan_hash"] = _digest(document)
    return out


def mismatch(prefill: dict[str, Any], decode: dict[str, Any]) -> str | None:
    """The first field the two sides' geometries disagree on, with both values; None when equal."""
    found = first_difference(prefill, decode)
    if found is None:
        return None
    where, p_value, d_value = found
    return (f"prefill and decode disagree on {where}: prefill has {shown_value(p_value)}, decode has "
            f"{shown_value(d_value)}; start both sides with the same model and engine options")


def encode(kind: str, **fields: Any) -> bytes:
    return TAG + json.dumps({"kind": kind, **fields}, separators=(",", ":")).encode()


def decode(message: bytes) -> dict[str, Any] | None:
    """Our control message, or None for anything else (a READ's notification)."""
    if not message.startswith(TAG):
        return None
    try:
        value = json.loads(message[len(TAG):])
    except ValueError:
        return None
    return value if isinstance(value, dict) and "kind" in value else None
