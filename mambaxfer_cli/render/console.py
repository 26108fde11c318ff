"""The one rich console the commands print through."""

from __future__ import annotations

import os
import sys
from functools import lru_cache

PIPE_WIDTH = 120


@lru_cache(maxsize=None)
def console():
    from rich.console import Console

    # Piped output (CI logs, bug reports) gets a width that fits the tables, not rich's 80.
    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else PIPE_WIDTH
    return Console(highlight=False, width=width)
