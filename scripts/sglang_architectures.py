"""Extract the architectures an SGLang wheel serves into the JSON data file beside its release:
each ``srt/models/`` file's ``EntryClass`` (what its ``ModelRegistry`` collects), by class name,
with the file that declares it. Read with ``ast``: SGLang is not imported (some model files do not
import on a machine without a GPU).

    python scripts/sglang_architectures.py /path/to/site-packages/sglang mambaxfer_cli/engines/sglang/releases/v0_5_23
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path


def entry_classes(source: str) -> list[str]:
    """The class names a model file's module-level ``EntryClass`` names (one, or a list)."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass"
                                                for t in node.targets):
            values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            return [v.id for v in values if isinstance(v, ast.Name)]
    return []


def main(package: str, out_dir: str) -> None:
    served = {}
    for path in sorted((Path(package) / "srt" / "models").glob("*.py")):
        for name in entry_classes(path.read_text()):
            served.setdefault(name, f"models/{path.name}")
    doc = {"source": "sglang/srt/models/*.py EntryClass (ModelRegistry)", "served": served}
    (Path(out_dir) / "architectures.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:3])
