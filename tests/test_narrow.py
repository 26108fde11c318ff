"""Every command fits an 80- and a 60-column terminal without cutting a value.

Each command is rendered wide (a reference no table needs to shrink in), at 80 and at 60 columns,
with the width forced (``COLUMNS``) and, for some, in a real pseudo-terminal of that size. At each
narrow width: no line is wider than the terminal; every integer of the command's JSON document
that the wide text shows is there as often, unbroken; so is every shard ``[a, b)``, ID run
``a..b step s``, size ``12.5 MiB`` and pairing ``P TP 1 → D TP 2``; and no value is cut to an ellipsis.
``--help`` of every command fits too, and shows every option name and default whole at 80 columns.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from rich.cells import cell_len

from cli_run import run_cli

ROOT = Path(__file__).resolve().parents[1]
PREFLIGHT = ROOT / "examples" / "preflight"
WIDE = "250"
NARROW = (80, 60)

# command name -> the cases rendered (each also run with --format json for its numbers)
CASES = {
    "plan": [("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "4"),
             ("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "4", "--show", "all"),
             ("plan", "--model", "granite-4.0-h-tiny", "--p-tp", "1", "--d-tp", "2", "--semantics", "vllm",
              "--show", "all"),
             ("plan", "--model", "qwen3.5-0.8b", "--p-tp", "4", "--d-tp", "1", "--show", "all")],
    "inspect": [("inspect", "--model", "granite-4.0-h-tiny", "--tp", "1,4"),
                ("inspect", "--model", "qwen3-next-80b", "--tp", "1,8")],
    "check": [("check", "--model", "granite-4.0-h-tiny", "--pairs", "1:2,2:1,1:4"),
              ("check", "--model", "granite-4.0-h-tiny", "--pairs", "1:2,2:1", "--semantics", "vllm"),
              ("check", "--model", "mamba-130m", "--max-tp", "3", "--semantics", "exact")],
    "preflight": [("preflight", "--prefill-file", str(PREFLIGHT / "qwen35-prefill.sh"),
                   "--decode-file", str(PREFLIGHT / "qwen35-decode.sh")),
                  ("preflight", "--prefill-file", str(PREFLIGHT / "nemotron-prefill.sh"),
                   "--decode-file", str(PREFLIGHT / "nemotron-decode.sh"))],
    "models": [("models",)],
    "schema": [("schema", "check")],
    "execute": [("execute", "--model", "jamba", "--layers", "4", "--p-tp", "1", "--d-tp", "2", "--device", "cpu",
                 "--iters", "1"),
                ("execute", "--model", "granite-4.0-h-tiny", "--layers", "4", "--p-tp", "1", "--d-tp", "2",
                 "--semantics", "vllm", "--device", "cpu", "--iters", "1")],
    "bench": [("bench", "--model", "jamba", "--layers", "2", "--p-tp", "1", "--d-tp", "2", "--request-blocks", "1,4",
               "--iters", "2", "--device", "cpu")],
}
NEEDS_NIXL = {"execute", "bench"}
SHOWN = {"schema": 0, "models": 1, "execute": 1, "bench": 1}   # at least this many integers shown, else 3
COMMANDS = tuple(CASES)

# Values that must never be split across lines. Timings vary from run to run, so values are
# counted, not compared.
ATOMS = {
    "shard": re.compile(r"\[\d+, \d+\)"),
    "ID run": re.compile(r"\d+\.\.\d+(?: step \d+)?"),
    # a number glued to a word ('p99 GB/s', a header) is a name, not a size
    "size": re.compile(r"(?<![\w.])\d+(?:\.\d+)? (?:B|KiB|MiB|GiB|GB/s|s|ms|µs)(?![\w/])"),
    "pairing": re.compile(r"P TP \d+ → D TP \d+"),
    "ellipsis": re.compile(r"…"),
}
DECIMAL = re.compile(r"\d+\.\d+")


def _cases() -> list:
    return [pytest.param(args, id=" ".join(args[:1] + args[2:4]).replace("/", "_"))
            for cases in CASES.values() for args in cases]


def integers(document) -> set[int]:
    """Every integer of a JSON document (two digits or more: single digits are everywhere)."""
    found: set[int] = set()

    def walk(value) -> None:
        if isinstance(value, bool):
            return
        if isinstance(value, int) and abs(value) >= 10:
            found.add(abs(value))
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(document)
    return found


def count(number: int, text: str) -> int:
    """Whole occurrences of an integer: not part of a longer number, a decimal or an ID run's
    other end (counted by the ID-run atom)."""
    text = DECIMAL.sub(" ", text)
    return len(re.findall(rf"(?<![\d]){number}(?![\d])", text))


def document_of(args) -> dict:
    if args[0] == "schema":
        return json.loads(run_cli(*args).stdout)
    result = run_cli(*args, "--format", "json")
    assert result.code in (0, 1), result.stderr
    return json.loads(result.stdout)


def render(args, columns: str) -> str:
    result = run_cli(*args, env={"COLUMNS": columns, "NO_COLOR": "1"})
    assert result.code in (0, 1), (columns, result.stderr)
    return result.stdout + result.stderr


def assert_whole(wide: str, narrow: str, width: int, numbers: set[int], document: bool = False) -> int:
    """Everything the wide text shows is in the narrow one, unbroken; returns how many integers.
    A document (``schema``'s JSON) is printed as it is, its lines as long as they are."""
    too_wide = [line for line in narrow.splitlines() if cell_len(line) > width and not document]
    assert not too_wide, f"{len(too_wide)} lines wider than {width}: {too_wide[:3]}"
    shown = [n for n in sorted(numbers) if count(n, wide)]
    broken = {n: (count(n, wide), count(n, narrow)) for n in shown if count(n, wide) != count(n, narrow)}
    assert not broken, f"at {width} columns, integers (wide, narrow occurrences): {broken}\n{narrow}"
    for name, pattern in ATOMS.items():
        wide_n, narrow_n = len(pattern.findall(wide)), len(pattern.findall(narrow))
        assert wide_n == narrow_n, f"at {width} columns, {wide_n} {name}s wide, {narrow_n} whole:\n{narrow}"
    return len(shown)


@pytest.mark.parametrize("args", _cases())
def test_every_value_whole_at_80_and_60_columns(args, request):
    if args[0] in NEEDS_NIXL:
        request.getfixturevalue("nixl")
    numbers = integers(document_of(args))
    if args[0] in NEEDS_NIXL:      # measured: keep what two runs agree on (bytes, counts), not timings
        numbers &= integers(document_of(args))
    wide = render(args, WIDE)
    assert "…" not in wide or args[0] == "plan", wide    # plan's ID lists end in '… N more'
    for width in NARROW:
        shown = assert_whole(wide, render(args, str(width)), width, numbers, document=args[0] == "schema")
        # the integers the text shows (sizes are shown in KiB/MiB; a JSON Schema holds none)
        assert shown >= SHOWN.get(args[0], 3), f"only {shown} integers shown: vacuous"


def pty_render(args, columns: int, rows: int = 40) -> str:
    """The command's standard output in a real pseudo-terminal of ``columns`` x ``rows``, colours
    removed (standard error, where progress bars run, is not kept)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "LINES", "NO_COLOR")}
    proc = subprocess.Popen([sys.executable, "-m", "mambaxfer_cli", *args], stdin=slave, stdout=slave,
                            stderr=subprocess.DEVNULL, env={**env, "TERM": "xterm-256color"}, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            proc.kill()
            raise AssertionError("no output for 60 s")
        try:
            chunk = os.read(master, 65536)
        except OSError:      # the other end closed: the command is done
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.wait(timeout=60) in (0, 1)
    text = b"".join(chunks).decode()
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07", "", text).replace("\r\n", "\n")


@pytest.mark.parametrize("args", [
    ("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "4", "--show", "all"),
    ("check", "--model", "granite-4.0-h-tiny", "--pairs", "1:2,1:4"),
])
def test_a_real_80_column_terminal(args):
    numbers = integers(document_of(args))
    wide = render(args, WIDE)
    assert assert_whole(wide, pty_render(args, 80), 80, numbers) >= 2


def option_names(command: str) -> list[str]:
    """Every option name of a command, from the command line's own definition."""
    import typer

    from mambaxfer_cli.cli import app

    root = typer.main.get_command(app)
    params = root.params if not command else root.commands[command].params
    return [name for param in params for name in (*param.opts, *param.secondary_opts)]


def test_every_command_is_covered():
    from cli_run import commands

    # conformance needs vLLM in this environment: tests/test_conformance.py renders its report at
    # 80 columns (from a report and through the vLLM interpreters).
    assert set(commands()) - {"conformance"} == set(COMMANDS)


# --help is typer's rich layout: a panel per group, each a table whose name columns share the
# width with the help column. It never draws wider than the terminal, but a panel whose longest
# names do not fit beside their help has them cut to an ellipsis: at 60 columns nearly every
# panel. At 80 and from HELP_WHOLE columns every name and default is whole.
HELP_WHOLE = 120


def _help(command: str, width: int) -> str:
    args = (command, "--help") if command else ("--help",)
    result = run_cli(*args, env={"COLUMNS": str(width)})
    assert result.code == 0, result.stderr
    assert all(cell_len(line) <= width for line in result.stdout.splitlines()), result.stdout
    return result.stdout


def _names_and_defaults_whole(command: str, text: str) -> None:
    assert "…" not in text
    names = option_names(command)
    assert names
    missing = [name for name in names if not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text)]
    assert not missing, f"{missing} not whole in:\n{text}"
    args = (command, "--help") if command else ("--help",)
    defaults = re.findall(r"\[default: ([^\]]+)\]", " ".join(run_cli(*args, env={"COLUMNS": WIDE}).stdout.split()))
    flat = " ".join(text.replace("│", " ").split())
    for value in defaults:
        assert re.search(rf"\[default: {re.escape(value)}\]", flat), (value, text)


@pytest.mark.parametrize("command", ["", *COMMANDS, "conformance"])
@pytest.mark.parametrize("width", NARROW)
def test_help_fits_the_terminal(command, width):
    text = _help(command, width)
    if width == 80:
        _names_and_defaults_whole(command, text)


@pytest.mark.parametrize("command", ["", *COMMANDS, "conformance"])
def test_help_shows_every_option_name_and_default_whole(command):
    _names_and_defaults_whole(command, _help(command, HELP_WHOLE))




@pytest.mark.parametrize("fast,slow", [(("9.99", "8.10 ms"), ("10.03", "81.02 ms")),
                                       (("0.45", "1.10 ms"), ("12.80", "120.50 ms"))])
def test_a_tables_layout_does_not_follow_the_measured_digits(fast, slow):
    """Whether a table fits, and where its headers wrap, is the same whatever the machine measured:
    a rate of 9.99 or 10.03 GB/s, a time of 8 or 81 ms (a docs example once went vertical on a
    fast run)."""
    from rich.console import Console
    from rich.table import Table

    from mambaxfer_cli.render.console import fit_all

    def shown(rate: str, time: str) -> list[list[str]]:
        table = Table()
        for name in ("D rank", "from P", "bytes", "descriptors", "after merge", "time", "GB/s", "verdict"):
            table.add_column(name)
        table.add_row("0", "P0", "9.3 MiB", "120", "120", time, rate, "verified")
        out = Console(width=80, record=True, highlight=False)
        out.print(fit_all([table], out)[0])
        text = out.export_text()
        assert max(cell_len(line) for line in text.splitlines()) <= 80
        return [re.sub(r"[\d.]+", "#", line).split() for line in text.splitlines()]

    assert shown(*fast) == shown(*slow)


def test_the_stacked_form_shows_an_unnamed_columns_value_alone():
    """A table too wide for the terminal prints each row as ``column: value`` pairs; a column with no
    header (preflight's agreement mark) shows its value alone, not as ': ✓'."""
    from rich.console import Console
    from rich.table import Table

    from mambaxfer_cli.render.console import fit_all

    table = Table(title="Compared")
    for name in ("field", "P", "D", ""):
        table.add_column(name)
    table.add_row("speculative", "method=mtp, model=" + "x" * 40, "method=mtp, model=" + "x" * 40, "✓")
    out = Console(width=80, record=True, highlight=False)
    out.print(fit_all([table], out)[0])
    text = out.export_text()
    assert "field: speculative" in text and "P: method=mtp" in text
    assert ": ✓" not in text and text.rstrip().endswith("· ✓"), text
