"""``bench --engine vllm,sglang``'s document, tables and chart (docs/sglang.md): both engines' bench
documents and, per device, one row per engine and direction, its planned descriptors beside the
one-descriptor limit's; vLLM's WRITE row is its layout pushed, so the table tells layout from direction.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from mambaxfer_cli.render.model_view import human_bytes
from mambaxfer_cli.render.console import tp_pairing

SCHEMA = "mambaxfer.bench-engines/v1"
BLOCKS, SLOTS = "per-block regions", "per-slot entries"


def _row(device: str, engine: str, release: str, direction: str, layout: str, request_blocks: int | None,
         planned: dict[str, Any], limit: dict[str, Any]) -> dict[str, Any]:
    rate, limit_rate = planned["gb_per_s"]["median"], limit["gb_per_s"]["median"]
    posted = planned["descriptors_posted"]
    return {"device": device, "engine": engine, "release": release, "direction": direction, "layout": layout,
            "request_blocks": request_blocks, "bytes": planned["bytes"], "descriptors": posted,
            "bytes_per_descriptor": planned["bytes"] // max(posted, 1),
            "limit_descriptors": limit["descriptors_posted"], "gb_per_s": rate, "limit_gb_per_s": limit_rate,
            "ratio": rate / limit_rate if limit_rate else 0.0,
            "verified": bool(planned["verified"] and limit["verified"]),
            "wrong_bytes": planned["wrong_bytes"] + limit["wrong_bytes"]}


def engines_document(vllm: dict[str, Any], sglang: list[dict[str, Any]]) -> dict[str, Any]:
    """Both engines' bench documents, and their rows side by side (per device: vLLM's READ and
    WRITE per request size, then SGLang's WRITE)."""
    rows = []
    versions = vllm.get("vllm_versions") or {}
    release = (str(versions.get("decode")) if versions.get("prefill") == versions.get("decode")
               else f"{versions.get('prefill')} (P) / {versions.get('decode')} (D)")
    for theirs in sglang:
        device = theirs["device"]
        for point in (p for p in vllm["points"] if p["device"] == device):
            for direction in ("READ", "WRITE"):
                variants = point["variants"][direction]
                rows.append(_row(device, "vllm", release, direction, BLOCKS, point["request_blocks"],
                                 variants["planned"], variants["limit"]))
        rows.append(_row(device, "sglang", theirs["release"], "WRITE", SLOTS, None, theirs["variants"]["planned"],
                         theirs["variants"]["limit"]))
    verified = bool(vllm["verified"]) and all(d["verified"] for d in sglang)
    return {"schema": SCHEMA, "engines": ["vllm", "sglang"], "model": vllm["model"], "p_tp": vllm["p_tp"],
            "d_tp": vllm["d_tp"], "iters": vllm["iters"], "semantics": vllm["semantics"], "rows": rows,
            "verified": verified, "vllm": vllm, "sglang": sglang}


def wrong_bytes(document: dict[str, Any]) -> int:
    """Wrong bytes over every variant both engines ran (vLLM's coalesced included)."""
    vllm = sum(row["wrong_bytes"] for point in document["vllm"]["points"]
               for rows in point["variants"].values() for row in rows.values())
    return vllm + sum(v["wrong_bytes"] for d in document["sglang"] for v in d["variants"].values())


def label(row: dict[str, Any]) -> str:
    """A row's name on the chart: the engine, its direction and layout, the request size for vLLM."""
    engine = "vLLM" if row["engine"] == "vllm" else "SGLang"
    size = f", {row['request_blocks']} blk" if row["request_blocks"] is not None else ""
    return f"{row['device']} {engine} {row['direction']} {'blocks' if row['layout'] == BLOCKS else 'slots'}{size}"


def draw_engines_chart(document: dict[str, Any], plt: Any) -> Any:
    """Per row, the planned rate beside the limit's (GB/s), each bar labelled with its descriptors
    and bytes per descriptor: the figure."""
    rows = document["rows"]
    fig, ax = plt.subplots(figsize=(7.5, 1.2 + 0.62 * len(rows)), dpi=120)
    height = 0.38
    colours = {"vllm": "tab:blue", "sglang": "tab:green"}
    for i, row in enumerate(rows):
        y = len(rows) - 1 - i
        ax.barh(y + height / 2, row["gb_per_s"], height, color=colours[row["engine"]],
                hatch="" if row["direction"] == "READ" else "//", edgecolor="white")
        ax.barh(y - height / 2, row["limit_gb_per_s"], height, color="black")
        ax.text(row["gb_per_s"], y + height / 2,
                f" {row['descriptors']} × {human_bytes(row['bytes_per_descriptor'])}"
                f"{'' if row['verified'] else ' WRONG'}", va="center", fontsize=7)
        ax.text(row["limit_gb_per_s"], y - height / 2, f" limit: {row['limit_descriptors']}, /lim "
                f"{row['ratio']:.2f}", va="center", fontsize=7)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([label(row) for row in reversed(rows)], fontsize=8)
    ax.set_xlabel("GB/s (median); black: one descriptor per P -> D pair, the same bytes")
    ax.set_xlim(0, max([r["gb_per_s"] for r in rows] + [r["limit_gb_per_s"] for r in rows] + [0.01]) * 1.45)
    ax.set_title(f"{document['model']} {tp_pairing(document['p_tp'], document['d_tp'])}: vLLM and SGLang",
                 fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    return fig


ENGINES_LEGEND = ("READ: D pulls, WRITE: P pushes; vLLM moves per-block regions, SGLang per-slot entries · "
                  "blk: blocks per request · desc: descriptors posted · GB/s: median · limit: one descriptor "
                  "per P -> D pair moving the same bytes, in the same run · /lim: GB/s over the limit's. The "
                  "engines move different bytes: compare /lim, not GB/s")


def engines_tables(document: dict[str, Any]) -> list[Table]:
    """Per device, each engine's planned descriptors against the limit: a row per engine, direction, size."""
    tables = []
    releases = {row["engine"]: row["release"] for row in document["rows"]}
    for device in dict.fromkeys(row["device"] for row in document["rows"]):
        rows = [row for row in document["rows"] if row["device"] == device]
        memory = "VRAM" if device == "cuda" else "DRAM"
        wrong = sum(not row["verified"] for row in rows)
        verdict = (f"every byte verified after each run ({len(rows)} rows, each planned and limit)" if not wrong
                   else f"{wrong} of {len(rows)} rows moved WRONG bytes")
        table = Table(title=f"{document['model']} {tp_pairing(document['p_tp'], document['d_tp'])}, vLLM "
                            f"{releases['vllm']} and SGLang {releases['sglang']}, {device} ({memory}), "
                            f"{document['iters']} iters", caption=f"{ENGINES_LEGEND}\n{verdict}",
                      title_justify="left", caption_justify="left", box=None, padding=(0, 1))
        for column in ("engine", "blk", "desc", "B/desc", "bytes", "GB/s", "limit", "/lim", "check"):
            table.add_column(column, justify="left" if column in ("engine", "check") else "right")
        for row in rows:
            table.add_row(f"{'vLLM' if row['engine'] == 'vllm' else 'SGLang'} {row['direction']}",
                          "" if row["request_blocks"] is None else str(row["request_blocks"]),
                          str(row["descriptors"]), human_bytes(row["bytes_per_descriptor"]),
                          human_bytes(row["bytes"]), f"{row['gb_per_s']:.2f}", f"{row['limit_gb_per_s']:.2f}",
                          f"{row['ratio']:.2f}", "ok" if row["verified"] else "WRONG")
        tables.append(table)
    return tables
