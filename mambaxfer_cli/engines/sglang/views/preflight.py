"""The rich report of an SGLang preflight (verdict first) and its JUnit XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Iterator

from rich.table import Table
from rich.text import Text

from mambaxfer_cli.engines.sglang.preflight import Report
from mambaxfer_cli.render.preflight_view import (
    cell_text, fields_table, fix_and_warnings, junit_suite, junit_text, opening, refusal_lines, titled_table,
)


def servers_table(report: Report) -> Table:
    a = report.assessment
    table = titled_table("Servers", ("", "prefill (P)", "decode (D)"))
    p, d = a.prefill.summary(), a.decode.summary()

    def tp(x: dict) -> str:
        return str(x["tp"]) if x["attention_tp"] == x["tp"] else f"{x['tp']} (attention {x['attention_tp']})"

    def dtype(x: dict, key: str) -> str:
        return f"{x[key]} ({x[f'{key}_from']})" if x[key] else "—"

    rows = [("mode", lambda x: x["disaggregation_mode"]), ("TP", tp), ("PP", lambda x: str(x["pp"])),
            ("page size", lambda x: str(x["page_size"]) + ("" if x["page_size"] == x["requested_page_size"] else
                                                           " (default)" if x["page_size"] == 1 else " (SGLang's)")),
            ("KV-cache dtype", lambda x: x["kv_cache_dtype"]),
            ("transfer backend", lambda x: x["transfer_backend"]),
            ("conv dtype", lambda x: dtype(x, "conv_dtype")), ("SSM dtype", lambda x: dtype(x, "ssm_dtype")),
            ("Mamba radix cache", lambda x: x["mamba_radix_cache_strategy"] if x["radix_cache"] else "off"),
            ("bootstrap port", lambda x: str(x["bootstrap_port"]))]
    for label, cell in rows:
        table.add_row(label, cell_text(cell(p)), cell_text(cell(d)))
    return table


def render_report(report: Report) -> Iterator[object]:
    a = report.assessment
    label = a.release.label
    yield from opening(report, label)
    yield servers_table(report)
    yield fields_table(f"Compared by {label} (bootstrap)", [f for f in a.fields if f.compared])
    yield fields_table(f"Not compared by {label}", [f for f in a.fields if not f.compared])
    yield from refusal_lines(label, a.refusals, "both servers start and D's bootstrap with P passes")
    yield Text("SGLang's writes on real bytes (as 'mambaxfer check --engine sglang')", style="bold")
    v = a.verdict
    if v is None:
        yield Text("  not run: a server does not start")
    elif v.refusal is not None:
        yield Text("  not run: SGLang refuses the pairing before it writes")
    else:
        for line in v.lines():
            yield Text(f"  {'✓' if v.right else '✗'} {line}", style="green" if v.right else "red")
        if not v.right:
            for o in v.outcomes:
                if o.bad:
                    yield Text(f"  D rank {o.d_rank} {o.field}: {o.bad:,} of {o.item_bytes:,} bytes wrong per "
                               f"layer", style="red")
    yield from fix_and_warnings(report)


def junit_xml(report: Report) -> str:
    """One test suite, two cases: SGLang's verdict on the pairing, and its writes."""
    a = report.assessment
    label = a.release.label
    root, suite = junit_suite(report, label, a.refused)
    case = ET.SubElement(suite, "testcase", classname="mambaxfer.preflight", name=f"{label}'s writes move the right "
                                                                                 f"bytes")
    if a.refused:
        ET.SubElement(case, "skipped", message="SGLang refuses the pairing before it writes")
    elif a.corrupt or a.fails:
        failure = ET.SubElement(case, "failure", message=report.headline(), type="mambaxfer.preflight")
        failure.text = "\n".join(a.verdict.lines() if a.verdict else [])
    return junit_text(root)
