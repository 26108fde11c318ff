"""The rich report of vLLM's preflight (verdict first) and its JUnit XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Callable, Iterator

from rich.table import Table
from rich.text import Text

from mambaxfer_cli.engines.vllm.engine import Engines
from mambaxfer_cli.engines.vllm.preflight.report import Report
from mambaxfer_cli.render.preflight_view import (
    cell_text, fields_table, fix_and_warnings, junit_suite, junit_text, opening, refusal_lines, titled_table,
)


def engines_table(report: Report) -> Table:
    a = report.assessment
    table = titled_table("Engines", ("", "prefill (P)", "decode (D)"))
    p, d = a.prefill.summary(), a.decode.summary()
    rows: list[tuple[str, str | Callable[[dict], str]]] = [
        ("TP", "tp"), ("dtype", "dtype"), ("KV-cache dtype", "kv_cache_dtype"),
        ("attention backend", "attention_backend"), ("--block-size", "requested_block_size"),
        ("prefix caching", "prefix_caching"), ("conv / SSM dtype", lambda x: f"{x['conv_dtype']} / {x['ssm_dtype']}"),
        ("conv layout", "conv_layout"), ("num_spec / conv rows", lambda x: f"{x['num_spec']} / {x['conv_rows']}"),
        ("connector / role", lambda x: f"{cell_text(x['kv_connector'])}\n{cell_text(x['kv_role'])}"),
        ("KV layout / buffer", lambda x: f"{x['kv_cache_layout']}\n{x['kv_buffer_device']}")]
    for label, cell in rows:
        table.add_row(label, *(cell_text(x[cell]) if isinstance(cell, str) else cell(x) for x in (p, d)))
    if a.plan is not None:
        table.add_section()
        for label, shown in (("block (tokens)", lambda g: str(g.block_size)),
                             ("kernel × per logical", lambda g: f"{g.kernel_block_size} × {g.blocks_per_logical}"),
                             ("attention B/token", lambda g: cell_text(g.attention_bytes_per_token)),
                             ("SSM state B/rank", lambda g: str(g.state_bytes)),
                             ("page bytes", lambda g: str(g.page_bytes))):
            table.add_row(label, *(shown(side.geometry) for side in a.plan.served))
    return table


def render_report(report: Report) -> Iterator[object]:
    a = report.assessment
    yield from opening(report, Engines(a.prefill.flags, a.decode.flags).describe())
    yield engines_table(report)
    yield fields_table(f"Compared by {a.releases} (hash, handshake)",
                       [f for f in a.fields if f.compared])
    yield fields_table(f"Not compared by {a.releases}",
                       [f for f in a.fields if not f.compared])
    for f in a.unchecked_mismatches:
        yield Text(f"{f.name} differs (P {f.prefill}, D {f.decode}): vLLM's handshake does not compare it",
                   style="bold red")
    yield from refusal_lines(a.releases, a.refusals, "both engines start and D's handshake with P passes")
    yield Text("Byte-level check of vLLM's reads (as 'mambaxfer check --semantics vllm')", style="bold")
    check, sim = a.byte_check, a.simulation
    if check is None or sim is None:
        yield Text(f"  not run: {a.byte_check_skipped}")
    elif sim.ok:
        yield Text(f"  ✓ every byte right: {sim.bytes_verified} bytes of D's memory verified, "
                   f"{check.bytes} bytes moved", style="green")
    else:
        for line in check.explanation(limit=6):
            if not line.startswith((f"{a.releases} refuses", "fix:")):    # the Fix section below says the fix
                yield Text(f"  {line}", style="red")
    yield from fix_and_warnings(report)


def junit_xml(report: Report) -> str:
    """One test suite, three cases: vLLM's verdict, the byte-level check, and the fix."""
    a = report.assessment
    root, suite = junit_suite(report, a.releases, a.byte_check is None and not a.fails)
    case = ET.SubElement(suite, "testcase", classname="mambaxfer.preflight", name="vLLM's reads move the right bytes")
    if a.fails:
        failure = ET.SubElement(case, "failure", message=report.headline(), type="mambaxfer.preflight")
        failure.text = "\n".join(f"{m}" for m in a.length_mismatches)
    elif a.byte_check is None:
        ET.SubElement(case, "skipped", message=a.byte_check_skipped)
    elif a.simulation is not None and not a.simulation.ok:
        lines = [line for line in a.byte_check.explanation(limit=1000) if not line.startswith("fix:")]
        failure = ET.SubElement(case, "failure", message=report.headline(), type="mambaxfer.preflight")
        failure.text = "\n".join(lines)
    return junit_text(root)
