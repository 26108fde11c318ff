"""Where two plan documents first differ, and how a value is shown in the message that says so."""

from __future__ import annotations

import json
from typing import Any

MISSING = object()


def first_difference(a: Any, b: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """The first path where ``a`` and ``b`` differ, with both values (MISSING where one has none)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in [*a, *(k for k in b if k not in a)]:
            if key not in a or key not in b:
                return f"{path}.{key}".lstrip("."), a.get(key, MISSING), b.get(key, MISSING)
            found = first_difference(a[key], b[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return None if len(a) == len(b) else (f"{path}.length".lstrip("."), len(a), len(b))
    return None if a == b and type(a) is type(b) else (path.lstrip("."), a, b)


def comparable(document: dict[str, Any]) -> dict[str, Any]:
    """JSON-normalised, warning texts left out (their wording is not part of the contract)."""
    out: dict[str, Any] = json.loads(json.dumps(document, default=str))
    out["warnings"] = [w.get("code") if isinstance(w, dict) else w for w in out.get("warnings", [])]
    out.pop("producer", None)   # any version's document is the same plan
    if isinstance(out.get("model"), dict):
        out["model"].pop("origin", None)   # why each dtype is what it is: an explanation, not the plan
    return out


def shown_value(value: Any) -> str:
    if value is MISSING:
        return "nothing"
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."
