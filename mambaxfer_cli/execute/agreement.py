"""Two hosts' control messages over NIXL notifications, and where their geometries disagree."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from mambaxfer_cli.execute.difference import first_difference, shown_value

TAG = b"mambaxfer:"            # marks our control notifications apart from the READs' own


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


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
