"""Write mambaxfer_cli/presets/compiled.json: every built-in preset's YAML model file, parsed.

    python scripts/compile_presets.py            # rewrite it from the YAML files
    python scripts/compile_presets.py --check    # only say whether it differs (exit 1 if it does)

The YAML files stay the presets' source (and the model-file format's examples, docs/models.md);
loading a preset reads the compiled JSON, which spares every command that names one PyYAML's
import. tests/test_model_source.py fails when the two disagree.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from mambaxfer_cli.readers.documents import parse_yaml, read_text
from mambaxfer_cli.readers.model_source import COMPILED_PRESETS, PRESET_DIR, preset_names


def compiled() -> str:
    """The compiled document's text: each preset's parsed YAML, by name, in name order."""
    presets: dict[str, Any] = {}
    for name in preset_names():
        path = PRESET_DIR / f"{name}.yaml"
        presets[name] = parse_yaml(read_text(path, str(path)), str(path))
    return json.dumps(presets, indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs, write nothing")
    args = parser.parse_args()
    text = compiled()
    current = COMPILED_PRESETS.read_text(encoding="utf-8") if COMPILED_PRESETS.exists() else None
    if args.check:
        print(f"{COMPILED_PRESETS}: {'up to date' if current == text else 'differs from the YAML files'}")
        return 0 if current == text else 1
    if current != text:
        COMPILED_PRESETS.write_text(text, encoding="utf-8")
        print(f"wrote {COMPILED_PRESETS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
