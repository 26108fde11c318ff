"""Start-up: `mambaxfer plan ... --format json` and `mambaxfer --help` against a minimal typer
application that parses the same options and prints a small JSON document (the floor: typer's
own import and parsing costs; mambaxfer runs on typer too). Runs alternate, one after the other,
in one process; prints medians and ratios.

    python benchmarks/startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FLOOR = '''
import json
from typing import Optional
import typer
app = typer.Typer(add_completion=False)
@app.command()
def plan(model: str = typer.Option(...), p_tp: int = typer.Option(..., "--p-tp"),
         d_tp: int = typer.Option(..., "--d-tp"), format: str = typer.Option("table", "--format")) -> None:
    """Plan."""
    print(json.dumps({"model": model, "p_tp": p_tp, "d_tp": d_tp}))
@app.command()
def other() -> None:
    """Other."""
app()
'''

PLAN = ["plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "4", "--format", "json"]


# As an installed package runs: with compiled bytecode (a PYTHONDONTWRITEBYTECODE environment would
# time the compiler on every start).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def wall(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        floor = Path(tmp) / "floor.py"
        floor.write_text(FLOOR)
        cases = {"floor plan": [sys.executable, str(floor), "plan", "--model", "jamba", "--p-tp", "1",
                                "--d-tp", "4", "--format", "json"],
                 "floor --help": [sys.executable, str(floor), "--help"],
                 "mambaxfer plan": [sys.executable, "-m", "mambaxfer_cli", *PLAN],
                 "mambaxfer --help": [sys.executable, "-m", "mambaxfer_cli", "--help"]}
        times = {name: [] for name in cases}
        for command in cases.values():   # warm the file cache
            wall(command)
        for _ in range(args.runs):
            for name, command in cases.items():
                times[name].append(wall(command))
    med = {name: statistics.median(t) for name, t in times.items()}
    for name, value in med.items():
        print(f"{name:<18} {value * 1e3:7.1f} ms (median of {args.runs})")
    print(f"plan / floor   = {med['mambaxfer plan'] / med['floor plan']:.2f}x   (goal <= 1.3x)")
    print(f"--help / floor = {med['mambaxfer --help'] / med['floor --help']:.2f}x   (goal <= 1.2x)")


if __name__ == "__main__":
    main()
