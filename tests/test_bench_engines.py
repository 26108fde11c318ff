"""``mambaxfer bench --engine vllm,sglang``: vLLM's READ (and WRITE) of per-block regions and
SGLang's WRITE of per-slot entries for one model and pairing in one run, each against one
descriptor per P -> D pair, every byte verified; refusals before any rank starts; faults and
Ctrl-C end as they do for one engine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from cli_run import assert_refused, assert_user_error, charted, messages, run_cli
from mambaxfer_cli.engines.sglang.plan import plan
from mambaxfer_cli.execute.faults import FAULT_ENV
from mambaxfer_cli.execute.tasks import cut_layers
from mambaxfer_cli.engines.sglang.transfer.run import D_SLOT, P_SLOT, chosen_writes
from mambaxfer_cli.readers.model_source import load_model
from rank_processes import (
    PROGRESS_LOG, as_a_shell_starts, assert_fault_fails_the_run, assert_no_rank_left, new_tag, wait_until,
)

MODEL, LAYERS, P_TP, D_TP = "qwen3.5-0.8b", 4, 1, 2
SMALL = ("bench", "--engine", "vllm,sglang", "--model", MODEL, "--layers", str(LAYERS), "--device", "cpu",
         "--iters", "2")
RUN_TAG = new_tag()
CHART: dict = {}


@pytest.fixture(scope="module")
def document(nixl, tmp_path_factory) -> dict:
    chart = tmp_path_factory.mktemp("bench-engines") / "chart.png"
    result = run_cli(*SMALL, "--p-tp", str(P_TP), "--d-tp", str(D_TP), "--format", "json", "--timeout", "90",
                     *charted(chart), timeout=300, env=RUN_TAG)
    assert result.code == 0, result.stderr
    assert "Traceback" not in result.stderr
    CHART.update(path=chart, stderr=result.stderr)
    return json.loads(result.stdout)


def test_the_document_follows_its_schema_and_holds_both_engines_documents(document):
    import jsonschema

    schema = json.loads(run_cli("schema", "bench-engines").stdout)
    jsonschema.Draft202012Validator(schema).validate(document)
    assert document["engines"] == ["vllm", "sglang"] and document["verified"]
    assert document["vllm"]["schema"] == "mambaxfer.bench/v1" and document["vllm"]["verified"]
    assert [d["schema"] for d in document["sglang"]] == ["mambaxfer.sglang-bench/v1"]
    assert (document["model"], document["p_tp"], document["d_tp"]) == (MODEL, P_TP, D_TP)
    # side by side both move mambaxfer's exact transfer, though each alone moves its engine's own
    assert {document["vllm"]["semantics"], *(d["semantics"] for d in document["sglang"])} == {"exact"}


def test_each_row_is_its_engines_own_planned_and_limit_figures(document):
    rows = document["rows"]
    assert [(r["engine"], r["direction"], r["layout"], r["request_blocks"]) for r in rows] == [
        ("vllm", "READ", "per-block regions", 1), ("vllm", "WRITE", "per-block regions", 1),
        ("sglang", "WRITE", "per-slot entries", None)]    # one block per KV-cache group unless --request-blocks
    point = document["vllm"]["points"][0]
    for row in rows:
        own = (point["variants"][row["direction"]] if row["engine"] == "vllm"
               else document["sglang"][0]["variants"])
        planned, limit = own["planned"], own["limit"]
        assert row["descriptors"] == planned["descriptors_posted"] and row["bytes"] == planned["bytes"]
        assert row["limit_descriptors"] == limit["descriptors_posted"] and limit["bytes"] == planned["bytes"]
        assert row["bytes_per_descriptor"] == row["bytes"] // row["descriptors"]
        assert row["gb_per_s"] == planned["gb_per_s"]["median"]
        assert row["limit_gb_per_s"] == limit["gb_per_s"]["median"]
        assert row["ratio"] == pytest.approx(row["gb_per_s"] / row["limit_gb_per_s"])
        assert row["verified"] and row["wrong_bytes"] == 0
        assert planned["checked_bytes"] > 0 and limit["checked_bytes"] > 0


def test_sglang_moves_its_exact_plan_and_the_limit_one_descriptor_per_pair(document):
    exact = chosen_writes(plan(cut_layers(load_model(MODEL), LAYERS), P_TP, D_TP), "exact").descriptors(P_SLOT, D_SLOT)
    row = document["rows"][-1]
    assert row["descriptors"] == len(exact) and row["bytes"] == sum(x.length for x in exact)
    assert row["limit_descriptors"] == len({(x.p_rank, x.d_rank) for x in exact}) == max(P_TP, D_TP)


def test_the_table_fits_80_columns_and_names_both_engines(document):
    from rich.console import Console

    from mambaxfer_cli.engines.sglang.beside import engines_tables
    from mambaxfer_cli.render.console import fit_all

    out = Console(width=80, record=True, file=open(os.devnull, "w"), color_system=None)
    for table in engines_tables(document):
        out.print(fit_all([table], out)[0])
    text = out.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    lines = [line.split() for line in text.splitlines()]
    assert ["engine", "blk", "desc", "B/desc", "bytes", "GB/s", "limit", "/lim", "check"] in lines
    assert [line[:2] for line in lines if line[:1] in (["vLLM"], ["SGLang"])] == [
        ["vLLM", "READ"], ["vLLM", "WRITE"], ["SGLang", "WRITE"]]
    words = " ".join(text.split())
    assert "compare /lim, not GB/s" in words and "every byte verified after each run (3 rows" in words


def test_the_chart_is_a_png_or_one_line_saying_why_not(document):
    said = " ".join(CHART["stderr"].split())
    if CHART["path"].exists():
        assert CHART["path"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"chart written to {CHART['path']}" in said
    else:       # without matplotlib, bench refuses --chart before the run (tests/test_said_whole.py)
        pytest.skip("matplotlib is not installed")


def test_the_run_leaves_no_rank_behind(document):
    assert_no_rank_left(RUN_TAG)


@pytest.mark.parametrize("args,fragments", [
    (("--model", "jamba"), ("jamba: SGLang 0.5.23 has no Jamba model file",)),
    (("--d-tp", "3"), ("SGLang 0.5.23 cannot serve it at TP 3",)),
])
def test_what_an_engine_does_not_start_is_its_refusal_before_any_rank_starts(args, fragments):
    env = new_tag()
    result = run_cli("bench", "--engine", "vllm,sglang", "--model", MODEL, "--p-tp", "1", "--d-tp", "2",
                     "--device", "cpu", *args, env=env)     # a repeated option: its last value counts
    assert_refused(result, *fragments)
    assert result.stdout == ""
    assert_no_rank_left(env)


@pytest.mark.parametrize("args,fragments", [
    (("--semantics", "vllm"), ("--semantics vllm: with --engine vllm,sglang both engines move",)),
    (("--semantics", "sglang"), ("--engine sglang --semantics sglang",)),
    (("--chart", "chart.svg"), ("the chart is a PNG",)),
    (("--iters", "0"), ("--iters",)),
    (("--device", "tpu"), ("--device",)),
])
def test_refusals_are_one_line_before_any_rank_starts(args, fragments):
    env = new_tag()
    result = run_cli("bench", "--engine", "vllm,sglang", "--model", MODEL, "--p-tp", "1", "--d-tp", "2",
                     "--device", "cpu", *args, env=env)     # a repeated option: its last value counts
    assert_user_error(result, *fragments)
    assert len(messages(result.stderr)) == 1 and result.stdout == ""   # no warning of vLLM's run either
    assert_no_rank_left(env)


# The faults hit SGLang's ranks (vLLM's bench ranks have no fault points): the run fails after vLLM's half.
@pytest.mark.usefixtures("nixl")
@pytest.mark.parametrize("fault,message", [
    ("D1:die@serve", "D1 died (exit code 70) while serving"),
    ("P0:die@transfer", "P0 died (exit code 70) while"),
])
def test_a_killed_rank(fault, message):
    assert_fault_fails_the_run(fault, (*SMALL, "--p-tp", "1", "--d-tp", "2", "--timeout", "120"), message)


@pytest.mark.usefixtures("nixl")
def test_a_rank_that_never_answers_times_out():
    assert_fault_fails_the_run("D0:hang@serve", (*SMALL, "--p-tp", "1", "--d-tp", "2", "--timeout", "5"),
                               "timed out: D0 serving (answering P0) made no progress for 5s (--timeout)")


@pytest.mark.usefixtures("nixl")
def test_ctrl_c_leaves_one_line_and_no_process(tmp_path):
    log = tmp_path / "progress.log"
    env = {**os.environ, **new_tag(), FAULT_ENV: "D0:hang@serve", PROGRESS_LOG: str(log), "COLUMNS": "160"}
    proc = subprocess.Popen([sys.executable, "-m", "mambaxfer_cli", *SMALL, "--p-tp", "1", "--d-tp", "2",
                             "--timeout", "120"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, preexec_fn=as_a_shell_starts)
    try:
        wait_until(log, "D0", "answering P0", proc)     # SGLang's half: vLLM's ran, D0 hangs serving P0
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, (proc.returncode, err)
    assert out == "" and err.strip().splitlines() == ["interrupted"], err
    assert_no_rank_left(env)


def test_speculative_config_beside_sglang_is_one_line():
    result = run_cli("bench", "--engine", "vllm,sglang", "--model", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "1",
                     "--speculative-config", '{"method":"mtp","num_speculative_tokens":1}')
    assert result.code == 2 and "SGLang's side has no draft" in result.stderr, result.stderr
