"""The ``mambaxfer`` command's entry point (``python -m mambaxfer_cli`` too).

Its first act handles the stop signals, before the command line's modules are imported: a signal at
any moment of the command ends it with the signal's exit code and one line, never a traceback.
"""

from __future__ import annotations

import gc
import sys

from mambaxfer_cli import exits


def main() -> None:
    # Start-up creates many objects and few cycles: Python's collection every 700 new ones would
    # scan them again and again (a twentieth of a short command's time).
    gc.set_threshold(100_000)
    exits.install()
    try:
        from mambaxfer_cli.cli import flushed, run

        code = flushed(run(sys.argv[1:]))
    except KeyboardInterrupt as stop:     # while importing the command line, or as it returned
        code = exits.report(stop)
    exits.quiet()
    gc.freeze()     # the command has ended: Python's last collection, on the way out, would scan every object
    raise SystemExit(code)


if __name__ == "__main__":
    main()
