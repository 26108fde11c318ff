"""What the two sides of a vLLM two-host run compare before any byte moves: the plan's whole document
(any field it gains is compared too), its IDs hashed, in the order that names the cause first."""

from __future__ import annotations

from typing import Any

from mambaxfer_cli.engines.vllm.plan import Plan
from mambaxfer_cli.execute.agreement import digest
from mambaxfer_cli.execute.difference import comparable

FIRST = ("model", "semantics", "tp", "engines", "vllm", "descriptors")
LEFT_OUT = ("schema", "reads", "warnings")


def geometry(plan: Plan) -> dict[str, Any]:
    """The compared fields of a plan, in the order they are compared."""
    document = comparable(plan.to_dict())
    model = dict(document["model"])
    model["config_hash"] = digest(model.get("params"))
    parts = {"model": model, "semantics": document["semantics"],
             "tp": {"prefill": document["prefill"]["tp"], "decode": document["decode"]["tp"]},
             "descriptors": {k: v for k, v in document["descriptors"].items() if k != "reads"}}
    source = {**document, **parts}
    out = {key: source[key] for key in FIRST if key in source}
    out.update({k: v for k, v in document.items() if k not in out and k not in LEFT_OUT})
    out["plan_hash"] = digest(document)
    return out
