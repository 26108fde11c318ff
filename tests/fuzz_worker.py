"""Runs command lines through the real CLI entry (``mambaxfer_cli.cli.run``), one per line of
stdin, and reports for each its exit code, output, seconds and peak traced memory.

One process for many inputs keeps a fuzz run fast; each input gets its own directory, a limit on
the CPU time it may use (SIGPROF: a busy machine does not make an input slower by that measure)
and a ceiling on its wall time (SIGALRM: an input that blocks), and a fresh tracemalloc peak
(numpy's arrays are traced too). The process's data segment is capped, so a run-away allocation
fails here instead of eating the machine.

    {"argv": [...], "files": {"name": "<base64>"}, "timeout": 20, "wall": 300}   ->   {"code": 0, ...}
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
import tracemalloc

from mambaxfer_cli import cli

DATA_LIMIT = int(os.environ.get("FUZZ_DATA_LIMIT", 3 << 30))


class _Hang(BaseException):
    pass


_hung: list[bool] = []


def _on_alarm(signum, frame) -> None:
    _hung.append(True)
    raise _Hang()


def run_case(case: dict, root: str, index: int) -> dict:
    folder = os.path.join(root, str(index))
    os.mkdir(folder)
    for name, data in case.get("files", {}).items():
        with open(os.path.join(folder, name), "wb") as handle:
            handle.write(base64.b64decode(data))
    os.chdir(folder)
    out, err = io.StringIO(), io.StringIO()
    _hung.clear()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    started, cpu = time.monotonic(), time.process_time()
    signal.setitimer(signal.ITIMER_PROF, float(case.get("timeout", 20)))
    signal.setitimer(signal.ITIMER_REAL, float(case.get("wall", 300)))
    code = None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.run(case["argv"])
    except _Hang:
        pass
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
    seconds, cpu = time.monotonic() - started, time.process_time() - cpu
    peak = tracemalloc.get_traced_memory()[1] - base
    os.chdir(root)
    return {"code": code, "hang": bool(_hung), "seconds": round(seconds, 3), "cpu_seconds": round(cpu, 3),
            "peak_bytes": peak,
            "stdout": out.getvalue()[:2000], "stderr": err.getvalue()[:6000]}


def main() -> None:
    resource.setrlimit(resource.RLIMIT_DATA, (DATA_LIMIT, DATA_LIMIT))
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGPROF, _on_alarm)
    tracemalloc.start()
    root = tempfile.mkdtemp(prefix="mambaxfer-fuzz-")
    try:
        for index, line in enumerate(sys.stdin):
            result = run_case(json.loads(line), root, index)
            sys.__stdout__.write(json.dumps(result) + "\n")
            sys.__stdout__.flush()
    finally:
        shutil.rmtree(root, ignore_errors=True)   # the cases' files, gone with the worker


if __name__ == "__main__":
    main()
