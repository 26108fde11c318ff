"""How SGLang's answers look: plan, check, inspect, preflight, execute and conformance."""

from __future__ import annotations

from typing import Any, Sequence

from rich.console import JustifyMethod
from rich.table import Table


def columns_table(title: str, columns: Sequence[tuple[str, JustifyMethod]], no_wrap: bool = True,
                  **table: Any) -> Table:
    """A table titled on the left, with these columns."""
    out = Table(title=title, title_justify="left", **table)
    for column, justify in columns:
        out.add_column(column, justify=justify, no_wrap=no_wrap)
    return out
