"""Refresh every example output of README.md and docs/*.md from real runs, in one command:

    python scripts/update_docs.py            # rewrite the outputs
    python scripts/update_docs.py --check    # only say which differ (exit 1 if any)
    python scripts/update_docs.py docs/sglang.md   # only these pages

Markers, each followed by its output block(s) (a ```text fence; prose may stand between):

- ``<!-- run: COMMAND -->``: one block, COMMAND's output (stdout and stderr, as a terminal shows
  them one after the other). COMMAND is a
  shell line (``&&`` chains work) run in a fresh directory that holds a link to ``examples/``, at
  80 columns, without colours.
- ``<!-- run-together: FIRST ;; SECOND -->``: two blocks; both commands started at once (the
  two sides of a two-host run), each block one command's output.

tests/test_docs.py runs every marker again and compares, letting only timings and rates vary
(``normalise``). Run from the repository root with the package installed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = 80
MARKER = re.compile(r"<!-- (?P<kind>run|run-together): (?P<cmd>.+?) -->\n", re.S)
FENCE = re.compile(r"```text\n(?P<body>.*?)```", re.S)
# What varies from run to run: timings and rates, i.e. a number with a unit of time or rate, or
# with two decimals (how mambaxfer prints them, e.g. in a 'GB/s' column; sizes have one decimal),
# but not a release ("vLLM 0.34"), which has two decimals too and must match.
TIMED = re.compile(r"\d+(?:\.\d+)?\s?(?:s|ms|µs|GB/s)(?![\w/])|(?<![\d.])(?<!vLLM )\d+\.\d\d(?![\d.])")
BOX = re.compile(r"[─━│┃┏┓┗┛┡┩└┘├┤┼╇╈┳┻┯┷╭╮╯╰┌┐┬┴═║]")
NEEDS_NIXL = re.compile(r"\bmambaxfer (?:execute|bench)\b")


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Example:
    path: Path
    kind: str                      # run | run-together
    commands: tuple[str, ...]
    spans: tuple[tuple[int, int], ...]   # where each output block's body is in the file's text
    shown: tuple[str, ...]               # the bodies as the file has them

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}: {' ;; '.join(self.commands)}"

    @property
    def needs_nixl(self) -> bool:
        return any(NEEDS_NIXL.search(command) for command in self.commands)


def examples(path: Path) -> list[Example]:
    text = path.read_text()
    found = []
    for marker in MARKER.finditer(text):
        commands = tuple(c.strip() for c in marker.group("cmd").split(";;"))
        if marker.group("kind") == "run" and len(commands) != 1:
            raise SystemExit(f"{path}: '<!-- run: ... -->' takes one command: {marker.group(0)!r}")
        at, spans, shown = marker.end(), [], []
        for _ in commands:
            fence = FENCE.search(text, at)
            following = MARKER.search(text, at)
            if fence is None or (following is not None and following.start() < fence.start()):
                raise SystemExit(f"{path}: no ```text block after {marker.group(0)!r}")
            spans.append(fence.span("body"))
            shown.append(fence.group("body"))
            at = fence.end()
        found.append(Example(path, marker.group("kind"), commands, tuple(spans), tuple(shown)))
    return found


def _environment() -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)     # the interpreter's own `mambaxfer` script
    return {**os.environ, "COLUMNS": str(COLUMNS), "NO_COLOR": "1", "TERM": "dumb",
            "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def _clean(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.rstrip().splitlines()) + "\n"


def run(example: Example, timeout: float = 600) -> tuple[str, ...]:
    """The real outputs of an example's commands, as its blocks should show them."""
    with tempfile.TemporaryDirectory(prefix="mambaxfer-docs-") as work:
        (Path(work) / "examples").symlink_to(ROOT / "examples")
        procs = [subprocess.Popen(["bash", "-c", command], cwd=work, env=_environment(), text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                 for command in example.commands]
        outputs = []
        for proc in procs:
            out, _ = proc.communicate(timeout=timeout)
            outputs.append(_clean(out))
    return tuple(outputs)


def normalise(text: str) -> str | list[str]:
    """What must be equal: the text itself, or where timings show, its words with every timing
    replaced (a timing's digits also move table borders and line breaks, so those go too)."""
    if not TIMED.search(text):
        return _clean(text)
    return BOX.sub(" ", TIMED.sub("⏱", text)).split()


def update(check: bool = False, only: list[str] | None = None) -> int:
    stale = 0
    chosen = {(ROOT / p).resolve() for p in only} if only else None
    for path in documents():
        if chosen is not None and path.resolve() not in chosen:
            continue
        found = examples(path)
        if not found:
            continue
        text = path.read_text()
        pieces, at = [], 0
        for example in found:
            outputs = run(example)
            for (start, end), shown, output in zip(example.spans, example.shown, outputs):
                if normalise(shown) == normalise(output):
                    output = shown      # only timings differ: keep the page as it is
                else:
                    stale += 1
                    print(f"{'stale' if check else 'updated'}: {example.name}", file=sys.stderr)
                pieces += [text[at:start], output]
                at = end
        pieces.append(text[at:])
        if not check:
            path.write_text("".join(pieces))
        print(f"{path.relative_to(ROOT)}: {len(found)} examples", file=sys.stderr)
    return 1 if check and stale else 0


if __name__ == "__main__":
    args = sys.argv[1:]
    raise SystemExit(update(check="--check" in args, only=[a for a in args if not a.startswith("--")]))
