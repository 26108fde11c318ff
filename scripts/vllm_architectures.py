"""Extract a vLLM wheel's architecture tables (model_executor/models/registry.py) into the JSON
data file beside its release module: the architectures its registry serves, and those it removed
(with the release it last served them in). Read with ``ast``; vLLM is not imported.

    python scripts/vllm_architectures.py /path/to/vllm-0.34.0/vllm mambaxfer_cli/engines/vllm/releases/v0_34
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

SERVED = ("_TEXT_GENERATION_MODELS", "_EMBEDDING_MODELS", "_LATE_INTERACTION_MODELS", "_REWARD_MODELS",
          "_TOKEN_CLASSIFICATION_MODELS", "_SEQUENCE_CLASSIFICATION_MODELS", "_MULTIMODAL_MODELS",
          "_SPECULATIVE_DECODING_MODELS", "_TRANSFORMERS_SUPPORTED_MODELS", "_TRANSFORMERS_BACKEND_MODELS")
REMOVED = "_PREVIOUSLY_SUPPORTED_MODELS"


def tables(registry: Path) -> dict[str, ast.Dict]:
    found = {}
    for node in ast.parse(registry.read_text()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and isinstance(value, ast.Dict):
            found[target.id] = value
    return found


def main(wheel: str, out_dir: str) -> None:
    found = tables(Path(wheel) / "model_executor" / "models" / "registry.py")
    served = sorted({ast.literal_eval(k) for name in SERVED if name in found for k in found[name].keys
                     if k is not None})
    removed = {ast.literal_eval(k): ast.literal_eval(v) for k, v in zip(found[REMOVED].keys, found[REMOVED].values)
               if k is not None}
    doc = {"source": "vllm/model_executor/models/registry.py", "served": served, "removed": removed}
    (Path(out_dir) / "architectures.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:3])
