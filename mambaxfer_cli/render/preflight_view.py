"""The rich report of a preflight (verdict first) and its JUnit XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Iterator

from rich.table import Table
from rich.text import Text

from mambaxfer_cli.exits import EXIT_OK
from mambaxfer_cli.engines.vllm.engine import Engines
from mambaxfer_cli.preflight import Field, Report, quote_lines

OK, BAD = Text("✓", style="green"), Text("✗", style="bold red")


def cell_text(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "on" if v else "off"
    return str(v)


def titled_table(title: str, columns: tuple[str, ...]) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold")
    for name in columns:
        table.add_column(name, overflow="fold", justify="left")
    return table


def model_origin(named: str, model) -> str:
    """Where the model a serve line names was read from: a preset (by name or by its source's
    repo id), or the file that holds its config."""
    from mambaxfer_cli.readers.model_source import preset_for_source, preset_names

    if model.name in preset_names() and named in (model.name, model.source) or preset_for_source(named) == model.name:
        return "" if named == model.name else f" ({model.name} preset)"
    return "" if model.source == named else f" ({model.source})"


def engines_table(report: Report) -> Table:
    a = report.assessment
    table = titled_table("Engines", ("", "prefill (P)", "decode (D)"))
    p, d = a.prefill.summary(), a.decode.summary()
    rows = [("TP", "tp"), ("dtype", "dtype"), ("KV-cache dtype", "kv_cache_dtype"),
            ("attention backend", "attention_backend"), ("--block-size", "requested_block_size"),
            ("prefix caching", "prefix_caching"), ("conv / SSM dtype", None), ("conv layout", "conv_layout"),
            ("num_spec / conv rows", None), ("connector / role", None), ("KV layout / buffer", None)]
    for label, key in rows:
        if label == "conv / SSM dtype":
            pv, dv = f"{p['conv_dtype']} / {p['ssm_dtype']}", f"{d['conv_dtype']} / {d['ssm_dtype']}"
        elif label == "num_spec / conv rows":
            pv, dv = f"{p['num_spec']} / {p['conv_rows']}", f"{d['num_spec']} / {d['conv_rows']}"
        elif label == "connector / role":
            pv, dv = (f"{cell_text(x['kv_connector'])}\n{cell_text(x['kv_role'])}" for x in (p, d))
        elif label == "KV layout / buffer":
            pv, dv = (f"{x['kv_cache_layout']}\n{x['kv_buffer_device']}" for x in (p, d))
        else:
            pv, dv = cell_text(p[key]), cell_text(d[key])
        table.add_row(label, pv, dv)
    if a.plan is not None:
        pg, dg = a.plan.prefill.geometry, a.plan.decode.geometry
        table.add_section()
        table.add_row("block (tokens)", str(pg.block_size), str(dg.block_size))
        table.add_row("kernel × per logical", f"{pg.kernel_block_size} × {pg.blocks_per_logical}",
                      f"{dg.kernel_block_size} × {dg.blocks_per_logical}")
        table.add_row("attention B/token", cell_text(pg.attention_bytes_per_token),
                      cell_text(dg.attention_bytes_per_token))
        table.add_row("SSM state B/rank", str(pg.state_bytes), str(dg.state_bytes))
        table.add_row("page bytes", str(pg.page_bytes), str(dg.page_bytes))
    return table


def fields_table(title: str, fields: list[Field]) -> Table:
    table = titled_table(title, ("field", "P", "D", ""))
    for f in fields:
        if f.name == "model":    # often a long path: named in full above the tables
            table.add_row(f.name, "as above", "the same" if f.agree else "another", OK if f.agree else BAD)
            continue
        table.add_row(f.name, cell_text(f.prefill), cell_text(f.decode), OK if f.agree else BAD)
    return table


def render_report(report: Report) -> Iterator[object]:
    a = report.assessment
    style = "bold green" if report.exit_code == EXIT_OK else "bold red"
    yield Text(report.headline(), style=style)
    yield Text("")
    for name, e in (("P", a.prefill), ("D", a.decode)):
        yield Text(f"{name} model: {e.line.model}{model_origin(e.line.model, e.model)}")
    yield Text(f"answered for {Engines(a.prefill.flags, a.decode.flags).describe()}")
    yield engines_table(report)
    yield fields_table(f"Compared by {a.releases} (hash, handshake)",
                       [f for f in a.fields if f.compared])
    yield fields_table(f"Not compared by {a.releases}",
                       [f for f in a.fields if not f.compared])
    for f in a.unchecked_mismatches:
        yield Text(f"{f.name} differs (P {f.prefill}, D {f.decode}): vLLM's handshake does not compare it",
                   style="bold red")
    yield Text(f"{a.releases}'s verdict", style="bold")
    if not a.refusals:
        yield Text("  accepts: both engines start and D's handshake with P passes", style="green")
    for r in a.refusals:
        yield Text(f"  ✗ {r.code}: {r.message}", style="red")
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
    if report.exit_code != EXIT_OK:
        yield Text("Fix", style="bold")
        if report.fix is None:
            yield Text("  no change of flags found that makes this pairing work")
        else:
            for c in report.fix.changes:
                yield Text(f"  {c.describe()}")
            yield Text(f"  corrected command lines (verified: {report.fix.after.verdict}):")
            for label, serve_line in (("prefill", report.fix.prefill), ("decode", report.fix.decode)):
                yield Text(f"  # {label}", style="dim")
                for part in quote_lines(serve_line, 76):
                    yield Text(f"  {part}", no_wrap=True, overflow="ignore")   # pasteable: never re-wrapped
    ignored = [(n, e.line.ignored) for n, e in (("P", a.prefill), ("D", a.decode)) if e.line.ignored]
    for name, flags in ignored:
        yield Text(f"{name}: ignored (no effect on the transfer): {', '.join(flags)}", style="dim")
    for w in report.warnings:
        yield Text(f"warning: {w}", style="yellow")


def junit_xml(report: Report) -> str:
    """One test suite, three cases: vLLM's verdict, the byte-level check, and the fix."""
    a = report.assessment
    root = ET.Element("testsuites", name="mambaxfer preflight")
    suite = ET.SubElement(root, "testsuite", name="mambaxfer preflight", tests="2",
                          failures=str(int(a.refused) + int(a.corrupt or a.fails)), errors="0",
                          skipped=str(int(a.byte_check is None and not a.fails)))
    case = ET.SubElement(suite, "testcase", classname="mambaxfer.preflight", name=f"{a.releases} accepts the pairing")
    if a.refused:
        failure = ET.SubElement(case, "failure", message=f"{a.refusals[0].code}: {a.refusals[0].message}",
                                type="mambaxfer.preflight")
        lines = [f"{r.code}: {r.message}" for r in a.refusals]
        if report.fix:
            lines += ["fix:"] + [c.describe() for c in report.fix.changes]
            lines += [report.fix.prefill.command(), report.fix.decode.command()]
        failure.text = "\n".join(lines)
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
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
