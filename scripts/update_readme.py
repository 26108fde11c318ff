"""Refresh the README's example outputs: every ```text block that follows a
``<!-- run: COMMAND -->`` marker is replaced by COMMAND's real output.

Run from the repository root with the package installed: ``python scripts/update_readme.py``.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"(<!-- run: (?P<cmd>.+?) -->\n```text\n)(?P<body>.*?)(```)", re.S)


def run(command: str) -> str:
    argv = shlex.split(command)
    if argv[0] == "mambaxfer":
        argv = [sys.executable, "-m", "mambaxfer_cli", *argv[1:]]
    env = {**os.environ, "COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb"}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, cwd=README.parent)
    text = proc.stdout + proc.stderr
    return "\n".join(line.rstrip() for line in text.rstrip().splitlines()) + "\n"


def main() -> None:
    text = README.read_text()
    updated = BLOCK.sub(lambda m: m.group(1) + run(m.group("cmd")) + m.group(4), text)
    README.write_text(updated)
    print(f"refreshed {len(BLOCK.findall(text))} example outputs in {README.name}")


if __name__ == "__main__":
    main()
