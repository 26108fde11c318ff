"""Rich views of a bench run: a progress bar on stderr, and one table per device and direction."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Column, Table

from mambaxfer_cli.render.console import columns_table, tp_pairing
from mambaxfer_cli.render.model_view import human_bytes


class BenchProgress:
    """One step per request size and device; the detail shows what the ranks are doing."""

    def __init__(self, total: int) -> None:
        self.console = Console(stderr=True, highlight=False)
        # The detail wraps inside its column (rich would cut the line at the terminal's edge).
        detail = TextColumn("{task.fields[detail]}", table_column=Column(no_wrap=False, overflow="fold", ratio=1))
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(bar_width=20), MofNCompleteColumn(),
                                 TimeElapsedColumn(), detail, console=self.console, transient=True, expand=True,
                                 disable=not self.console.is_terminal)
        self.task = self.progress.add_task("bench", total=total, detail="")

    def __enter__(self) -> "BenchProgress":
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def start(self, description: str) -> None:
        self.progress.update(self.task, description=description, detail="")

    def update(self, name: str, phase: str, detail: str) -> None:
        self.progress.update(self.task, detail=f"{name} {phase} {detail}")

    def advance(self) -> None:
        self.progress.advance(self.task)


def bench_tables(document: dict[str, Any]) -> list[Table]:
    tables = []
    devices = sorted({p["device"] for p in document["points"]})
    for device in devices:
        points = [p for p in document["points"] if p["device"] == device]
        for direction, mode in document["directions"].items():
            transports = sorted({", ".join(p["transport"][direction]["transports"]) or "?" for p in points})
            versions = document.get("vllm_versions") or {}
            release = (f", vLLM {versions['decode']}" if versions.get("prefill") == versions.get("decode")
                       else f", vLLM {versions.get('prefill')} (P) / {versions.get('decode')} (D)") if versions else ""
            moved = f", {document['semantics']} reads" if document.get("semantics") else ""    # which plan it moved
            title = (f"{document['model']} {tp_pairing(document['p_tp'], document['d_tp'])}{release}{moved}, "
                     f"{device}, {mode}, UCX: {'; '.join(transports)}, {document['iters']} iters")
            table = columns_table(title, [(column, "left" if column == "variant" else "right") for column in (
                "blk", "variant", "bytes", "desc", "kept", "GB/s", "p99 GB/s", "us/d", "prep ms", "post us", "/lim")],
                box=None, padding=(0, 1))
            for point in points:
                for name, row in point["variants"][direction].items():
                    ratio = point["ratios"][direction].get(f"{name}/limit")
                    table.add_row(str(point["request_blocks"]), name + ("" if row["verified"] else " WRONG"),
                                  human_bytes(row["bytes"]), str(row["descriptors_posted"]),
                                  str(row["descriptors_kept"]), f"{row['gb_per_s']['median']:.2f}",
                                  f"{row['gb_per_s']['p99']:.2f}", f"{row['per_descriptor_us']:.1f}",
                                  f"{row['prep_ms'] + row['make_ms']:.1f}", f"{row['post_us']['median']:.0f}",
                                  "" if ratio is None else f"{ratio:.2f}")
            table.caption = legend(points, direction)
            tables.append(table)
    return tables


LEGEND = ("blk: blocks per request · desc/kept: descriptors posted, and kept after NIXL's merge · GB/s: "
          "median rate, p99 GB/s: the rate at the 99th-percentile time · us/d: microseconds per posted "
          "descriptor · prep ms: prep_xfer_dlist + make_prepped_xfer · post us: median time to post · /lim: "
          "GB/s over the limit row's (one descriptor per source)")


def legend(points: list[dict[str, Any]], direction: str) -> str:
    """What the columns mean, and whether every byte was verified."""
    rows = [row for point in points for row in point["variants"][direction].values()]
    wrong = sum(not row["verified"] for row in rows)
    verdict = (f"every byte verified after each run ({len(rows)} rows)" if not wrong else
               f"{wrong} of {len(rows)} rows moved WRONG bytes")
    return f"{LEGEND}\n{verdict}"
