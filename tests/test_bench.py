"""mambaxfer bench: its document and the consistency of its ratios (never its speed), on real
NIXL transfers over DRAM, and every byte still verified after a bench run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cli_run import charted, messages, run_cli
from mambaxfer_cli.engines.vllm.transfer.bench import transports
from mambaxfer_cli.engines.vllm.transfer.bench_variants import LIMIT, ORDER, limit_chunks
from mambaxfer_cli.engines.vllm.transfer.plan_source import plan_to_execute
from mambaxfer_cli.execute.tasks import cut_layers
from mambaxfer_cli.engines.vllm.transfer.verify import Tally
from mambaxfer_cli.readers.model_source import load_model
from mambaxfer_cli.engines.vllm.proof.addresses import resolve
from rank_processes import assert_no_rank_left, new_tag


RUN_TAG = new_tag()


CHART: dict = {}


@pytest.fixture(scope="module")
def document(nixl, tmp_path_factory) -> dict:
    chart = tmp_path_factory.mktemp("bench") / "chart.png"
    result = run_cli("bench", "--model", "jamba", "--p-tp", "2", "--d-tp", "1", "--layers", "4",
                     "--request-blocks", "1,3", "--iters", "3", "--device", "cpu", "--format", "json",
                     "--timeout", "60", *charted(chart), timeout=150, env=RUN_TAG)
    assert result.code == 0, result.stderr
    CHART.update(path=chart, stderr=result.stderr)
    return json.loads(result.stdout)


def test_the_document_follows_its_schema(document):
    import jsonschema

    from mambaxfer_cli.schema import document_schema

    jsonschema.validate(document, document_schema("bench"))


def test_every_variant_moves_the_same_bytes_and_verifies_them(document):
    assert document["schema"] == "mambaxfer.bench/v1" and document["verified"] is True
    assert [p["request_blocks"] for p in document["points"]] == [1, 3]
    for point in document["points"]:
        rows = [point["variants"][d][v] for d in ("READ", "WRITE") for v in ORDER]
        assert len({r["bytes"] for r in rows}) == 1
        assert all(r["verified"] and r["wrong_bytes"] == 0 and r["checked_bytes"] > 0 for r in rows)
        for direction in ("READ", "WRITE"):
            assert point["transport"][direction]["transports"], point["transport"]   # UCX named its lanes


def test_ratios_and_figures_are_consistent(document):
    small, large = document["points"]
    assert large["variants"]["READ"]["planned"]["bytes"] == 3 * small["variants"]["READ"]["planned"]["bytes"]
    for point in document["points"]:
        for direction, variants in point["variants"].items():
            limit = variants[LIMIT]
            assert limit["descriptors_posted"] == 2            # D0 reads from two P ranks: one descriptor each
            for name in ("planned", "coalesced"):
                row = variants[name]
                ratio = row["gb_per_s"]["median"] / limit["gb_per_s"]["median"]
                assert point["ratios"][direction][f"{name}/limit"] == pytest.approx(ratio)
                assert row["descriptors_kept"] <= row["descriptors_posted"]
            for row in variants.values():
                assert row["segment_bytes"] == row["bytes"] // row["descriptors_posted"]
                assert row["gb_per_s"]["median"] == pytest.approx(row["bytes"] / row["time_us"]["median"] / 1e3)
                assert len(row["times_s"]) == document["iters"]
                assert row["gb_per_s"]["p99"] <= row["gb_per_s"]["median"] * (1 + 1e-9)
        planned, coalesced = point["variants"]["READ"]["planned"], point["variants"]["READ"]["coalesced"]
        assert coalesced["descriptors_posted"] <= planned["descriptors_posted"]


def test_the_chart_is_a_png_or_one_line_saying_why_not(document):
    if CHART["path"].exists():
        assert CHART["path"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:       # without matplotlib, bench refuses --chart before the run (tests/test_said_whole.py)
        pytest.skip("matplotlib is not installed")


def test_limit_chunks_lie_back_to_back_and_carry_every_byte():
    plan = plan_to_execute(cut_layers(load_model("jamba"), 4), 4, 1, semantics="vllm", coalesce=False,
                           blocks=None, request_blocks=2, seed=0)
    reads = plan.descriptors.reads
    chunks = limit_chunks(reads)
    assert [c[0] for c in chunks] == [0, 1, 2, 3]
    assert sum(c[2] for c in chunks) == sum(int(resolve(r.local, r.local_ids)["size"].sum()) for r in reads)
    assert all(a[1] + a[2] == b[1] for a, b in zip(chunks, chunks[1:]))


def test_transports_read_from_ucx_info_lines():
    log = ("[1.2] [vm:1 :0] ucp_worker.c:1997 UCX  INFO    mambaxfer-ab-D0 self cfg#0 rma_am(tcp/lo) am(tcp/lo)\n"
           "[1.3] [vm:1 :0] ucp_worker.c:1997 UCX  INFO    mambaxfer-ab-D0 intra-node cfg#1 rma_bw(cuda_ipc/cuda) "
           "am(tcp/lo cma/memory)  ka(tcp/lo)\n"
           "[1.4] [vm:2 :0] ucp_worker.c:1997 UCX  INFO    mambaxfer-ab-P0 intra-node cfg#1 rma_am(tcp/lo)\n"
           "[1.5] [vm:3 :0] ucp_worker.c:1997 UCX  INFO    mambaxfer-zz-P0 intra-node cfg#1 rma_bw(rc_mlx5/mlx5_0:1)\n")
    got = transports(log, "ab")
    assert got["READ"]["transports"] == ["cma", "cuda_ipc", "tcp"]
    assert got["WRITE"] == {"transports": ["tcp"], "ucx_lanes": ["rma_am(tcp/lo)"]}


def test_a_bench_leaves_no_rank_behind(document):
    assert_no_rank_left(RUN_TAG)


def test_bad_input_is_one_line_before_anything_runs():
    result = run_cli("bench", "--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--request-blocks", "0,x")
    assert result.code == 2 and "Traceback" not in result.stderr and "--request-blocks" in result.stderr
    result = run_cli("bench", "--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--chart", "out.svg")
    assert result.code == 2 and "PNG" in result.stderr


def test_a_sweep_that_cannot_fit_is_refused_up_front():
    """A request size whose engines take more than this machine's available memory: refused before
    any size runs (no rank starts), naming the size and what to change."""
    from mambaxfer_cli.engines.vllm.transfer.tasks import side_memory
    from mambaxfer_cli.execute.tasks import available_memory

    spec = load_model("mamba-codestral-7b")
    blocks = 16
    while True:
        plan = plan_to_execute(spec, 1, 1, semantics="vllm", coalesce=False, blocks=None, request_blocks=blocks, seed=0)
        if side_memory(plan.prefill).total_bytes + side_memory(plan.decode).total_bytes > available_memory():
            break
        blocks *= 2
    env = new_tag()
    result = run_cli("bench", "--model", "mamba-codestral-7b", "--p-tp", "1", "--d-tp", "1", "--request-blocks",
                     f"1,{blocks}", env=env)
    assert result.code == 2 and result.stdout == "", result.stderr
    line, = messages(result.stderr)
    assert line.startswith(f"error: cpu, --request-blocks {blocks}: this plan cannot be executed: its engines need ")
    assert line.endswith("available; use smaller --request-blocks or fewer --layers")
    assert_no_rank_left(env)


def test_a_pairing_vllm_refuses_is_said_on_stderr(nixl):
    result = run_cli("bench", "--model", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "4", "--layers", "4",
                     "--request-blocks", "1", "--iters", "1", "--device", "cpu", "--format", "json",
                     "--vllm-version", "0.33")
    assert result.code == 0, result.stderr
    assert ("warning: vLLM 0.33 would refuse this pairing at handshake (--block-size 144 fixes it): Local block "
            "size 320 is not divisible by remote block size 576 or vice versa; bench measures") in " ".join(
        result.stderr.split())      # wrapped at the terminal's width
    document = json.loads(result.stdout)       # stdout stays the document, which names the release
    assert document["vllm_versions"] == {"prefill": "0.33", "decode": "0.33"}
    assert document["gpu"] == {"prefill": "H100", "decode": "H100"}


def test_the_limit_check_finds_a_wrong_byte_in_a_chunk_and_outside_it():
    from mambaxfer_cli.engines.vllm.transfer.bench_variants import bench_tasks, limit_check
    from mambaxfer_cli.execute.tasks import RunSettings
    from mambaxfer_cli.proof.pattern import POISON, fill_page

    spec = cut_layers(load_model("jamba"), 4)
    planned, coalesced = (plan_to_execute(spec, 2, 1, semantics="vllm", coalesce=c, blocks=None, request_blocks=1,
                                          seed=0) for c in (False, True))
    _, (task,) = bench_tasks(planned, coalesced, RunSettings("t", "cpu", 0, "127.0.0.1", 0, 1))
    memory = np.full(task.memory.total_bytes, POISON, dtype=np.uint8)
    page, blocks = task.prefill_memory.page_bytes, task.prefill_memory.logical_blocks
    for p_rank, offset, size in limit_chunks(task.reads):    # what the limit READs land: P's first bytes
        image = np.empty(-(-size // page) * page, dtype=np.uint8).reshape(-1, page)
        for row in range(image.shape[0]):
            fill_page(image[row], task.prefill_pages[p_rank][row // blocks][row % blocks], row // blocks, row % blocks)
        memory[offset:offset + size] = image.reshape(-1)[:size]
    regions = np.split(memory, task.memory.tensors)       # bench's one allocation, tensor by tensor
    assert limit_check(task, regions) == Tally(memory.size, 0)
    end = sum(c[2] for c in limit_chunks(task.reads))
    memory[end - 1] ^= 0xFF                                # the last byte of the last chunk
    memory[-1] ^= 0x01                                     # a byte that must stay poison
    assert limit_check(task, regions) == Tally(memory.size, 2)


def test_a_killed_bench_leaves_nothing_in_its_temporary_folder(nixl, tmp_path):
    """SIGKILL cannot be caught, so nothing of a run may live in $TMPDIR for cleanup to miss: each
    rank's UCX info log is an unnamed in-memory file (memfd)."""
    import os
    import signal
    import subprocess
    import sys

    from rank_processes import PROGRESS_LOG, wait_until

    temp, log = tmp_path / "tmp", tmp_path / "progress.log"
    temp.mkdir()
    env = {**os.environ, **new_tag(), "TMPDIR": str(temp), PROGRESS_LOG: str(log)}
    proc = subprocess.Popen([sys.executable, "-m", "mambaxfer_cli", "bench", "--model", "jamba", "--p-tp", "1",
                             "--d-tp", "2", "--layers", "2", "--request-blocks", "1,2", "--device", "cpu",
                             "--format", "json", "--timeout", "60"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True)
    try:
        for rank in ("P0", "D0", "D1"):                   # every rank is up and has said something
            wait_until(log, rank, "", proc)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert_no_rank_left(env)
    assert sorted(p.name for p in temp.iterdir()) == []


def test_the_table_names_its_units_and_says_the_bytes_were_verified(document):
    from rich.console import Console

    from mambaxfer_cli.render.bench_view import bench_tables
    from mambaxfer_cli.render.console import fit_all

    out = Console(width=80, record=True, file=open("/dev/null", "w"), color_system=None)
    for table in bench_tables(document):
        out.print(fit_all([table], out)[0])
    text = out.export_text()
    words = " ".join(text.split())
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "p99 GB/s" in words and "us/d: microseconds per posted descriptor" in words
    assert "/lim: GB/s over the limit row's" in words
    assert "every byte verified after each run" in words


def test_the_progress_line_is_never_cut_at_80_columns():
    from rich.console import Console

    from mambaxfer_cli.render.bench_view import BenchProgress

    bar = BenchProgress(4)
    out = Console(width=80, record=True, file=open("/dev/null", "w"), color_system=None, force_terminal=True)
    bar.start("jamba 8P1D request 64 blocks")
    detail = "P3 registering 1,234,567,890 bytes of SSM state with the NIXL agent mambaxfer-P3"
    bar.update("P3", "prepare", detail)
    out.print(bar.progress.get_renderable())
    words = " ".join(out.export_text().split())
    assert detail in words


def test_chart_help_names_the_extra_whole():
    """--chart's help names pyproject's extra as pip takes it: rich's markup would eat '[bench]'."""
    from mambaxfer_cli.render.report import CHART_EXTRA

    result = run_cli("bench", "--help", env={"COLUMNS": "250"})
    assert result.code == 0, result.stderr
    assert CHART_EXTRA in result.stdout, result.stdout


@pytest.mark.parametrize("model", ["qwen3.5-0.8b", "qwen3.8-flash-next"])
def test_speculative_config_moves_and_verifies_the_draft_layers(nixl, model):
    """As execute: the MTP draft layer (Qwen4Exp's a QSA layer) joins the target's attention group
    and its page moves too, kept whatever --layers cuts: one descriptor more per D rank."""
    args = ("bench", "--model", model, "--p-tp", "1", "--d-tp", "2", "--layers", "4",
            "--request-blocks", "1", "--iters", "1", "--device", "cpu", "--format", "json")
    moved = []
    for extra in ((), ("--speculative-config", '{"method":"mtp","num_speculative_tokens":1}')):
        result = run_cli(*args, *extra, env=RUN_TAG)
        assert result.code == 0, result.stderr
        document = json.loads(result.stdout)
        assert document["verified"] is True
        moved.append(document["points"][0]["variants"]["READ"]["planned"])
    assert moved[1]["bytes"] > moved[0]["bytes"], moved
    assert moved[1]["descriptors_posted"] == moved[0]["descriptors_posted"] + 2, moved   # 2 D ranks
