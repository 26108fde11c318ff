"""Start-up: `mambaxfer plan ... --format json` and `mambaxfer --help` against a minimal typer
application that parses the same options and prints a small JSON document (the floor: typer's
own import and parsing costs; mambaxfer runs on typer too). Runs alternate, one after the other,
in one process; prints medians and ratios of wall time and of CPU time (user + system of each
process, which other work on the machine moves less).

    python benchmarks/startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import resource
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


def timed(command: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run."""
    started, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - started, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


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
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
        for command in cases.values():   # warm the file cache
            timed(command)
        for _ in range(args.runs):
            for name, command in cases.items():
                times[name].append(timed(command))
    for kind, at in (("wall", 0), ("CPU", 1)):
        med = {name: statistics.median(t[at] for t in runs) for name, runs in times.items()}
        for name, value in med.items():
            print(f"{name:<18} {value * 1e3:7.1f} ms {kind} (median of {args.runs})")
        print(f"plan / floor   = {med['mambaxfer plan'] / med['floor plan']:.2f}x {kind}   (goal <= 1.3x)")
        print(f"--help / floor = {med['mambaxfer --help'] / med['floor --help']:.2f}x {kind}   (goal <= 1.2x)")


if __name__ == "__main__":
    main()
