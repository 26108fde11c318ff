"""A check report as JUnit XML, the format CI systems show as test results."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from itertools import groupby

from mambaxfer_cli.engines.vllm.proof.check import CheckReport


def junit_xml(report: CheckReport) -> str:
    """One test suite per model, one test case per pairing; a failure carries the explanation."""
    root = ET.Element("testsuites", name="mambaxfer check", tests=str(len(report.results)),
                      failures=str(report.count("fail") + report.count("refused")), skipped=str(report.count("skip")),
                      errors="0", time=f"{report.seconds:.3f}")
    for model, group in groupby(report.results, key=lambda r: r.model):
        results = list(group)
        suite = ET.SubElement(
            root, "testsuite", name=f"mambaxfer check {model}", tests=str(len(results)),
            failures=str(sum(r.verdict in ("fail", "refused") for r in results)),
            skipped=str(sum(r.verdict == "skip" for r in results)), errors="0",
            time=f"{sum(r.seconds for r in results):.3f}")
        for r in results:
            name = f"{r.pairing} {r.semantics}" + (" coalesced" if r.coalesce else "")
            case = ET.SubElement(suite, "testcase", classname=f"mambaxfer.check.{model}", name=name,
                                 time=f"{r.seconds:.3f}")
            if r.verdict in ("fail", "refused"):
                lines = r.explanation(limit=1000)
                failure = ET.SubElement(case, "failure", message=lines[0] if lines else "check failed",
                                        type="mambaxfer.check")
                failure.text = "\n".join(lines)
            elif r.verdict == "skip":
                ET.SubElement(case, "skipped", message=r.reason)
            else:
                out = ET.SubElement(case, "system-out")
                out.text = (f"{r.reads} reads, {r.segments} segments, {r.descriptors} descriptor pairs, "
                            f"{r.bytes} bytes copied, "
                            f"{r.simulation.bytes_verified if r.simulation else 0} bytes verified"
                            + (f"; {r.deployment_line()}" if r.vllm_does else ""))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
