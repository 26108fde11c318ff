"""The toy's reports: its document, and the shared console's tables in its own words."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from mambaxfer_cli.exits import EXIT_OK, EXIT_WRONG
from mambaxfer_cli.render.report import Report


def _table(title: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> Table:
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, justify="left" if column in ("pairing", "verdict") else "right")
    for row in rows:
        table.add_row(*map(str, row))
    return table


class PlanReport(Report):
    def render(self, width: int) -> list[Any]:
        doc = self.document
        return [_table(f"toy: {doc['model']}, P TP {doc['p_tp']} → D TP {doc['d_tp']}, each layer's whole state "
                       f"({doc['state_bytes']} bytes) in one WRITE per D rank",
                       ("P rank", "D rank", "layer", "from byte", "to byte", "bytes"),
                       [(w["p_rank"], w["d_rank"], w["layer"], w["src_offset"], w["dst_offset"], w["length"])
                        for w in doc["writes"]])]


class CheckReport(Report):
    def __init__(self, document: dict[str, Any]) -> None:
        super().__init__(document, EXIT_OK if document["verified"] else EXIT_WRONG)

    def render(self, width: int) -> list[Any]:
        return [_table(f"toy: {model['model']}, every D byte against the pattern",
                       ("pairing", "writes", "bytes checked", "wrong bytes", "verdict"),
                       [(p["pairing"], p["writes"], p["bytes_checked"], p["wrong_bytes"],
                         "verified" if p["verified"] else "WRONG") for p in model["pairings"]])
                for model in self.document["models"]]


class RunReport(Report):
    """execute and bench: what moved between real NIXL agents, and every byte's verdict."""

    def __init__(self, document: dict[str, Any]) -> None:
        super().__init__(document, EXIT_OK if document["verified"] else EXIT_WRONG)

    def render(self, width: int) -> list[Any]:
        doc = self.document
        return [_table(f"toy: {doc['model']}, P TP {doc['p_tp']} → D TP {doc['d_tp']}, NIXL WRITEs in "
                       f"{doc['device']} memory",
                       ("writes", "bytes per round", "rounds", "median", "GB/s", "bytes checked", "wrong bytes",
                        "verdict"),
                       [(doc["writes"], doc["bytes_per_round"], doc["rounds"], f"{doc['median_s'] * 1e3:.3f} ms",
                         f"{doc['gb_per_s']:.3f}", doc["bytes_checked"], doc["wrong_bytes"],
                         "verified" if doc["verified"] else "WRONG")])]
