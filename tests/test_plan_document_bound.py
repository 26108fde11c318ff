"""``plan`` refuses up front a document ``execute --plan`` could not read back, and a bare
``--model config.json`` is named after its directory in every message."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from cli_run import assert_refused, assert_user_error, run_cli
from mambaxfer_cli.limits import MAX_FILE_BYTES, MAX_NODES
from mambaxfer_cli.readers.documents import parse_json

FIXTURES = Path(__file__).parent / "fixtures" / "hf-configs"


def test_a_plan_too_large_to_read_back_is_refused_before_it_is_built():
    # Reported: qwen3-next-80b 1:8 with 20000 request blocks used 7.8 GB and wrote a 949 MB document.
    # The address-space limit stands for "before it is built": building it needs gigabytes.
    result = run_cli("plan", "--model", "qwen3-next-80b", "--p-tp", "1", "--d-tp", "8", "--request-blocks", "20000",
                     preexec=lambda: __import__("resource").setrlimit(
                         __import__("resource").RLIMIT_AS, (3 << 30, 3 << 30)))
    assert_user_error(result, "20000 request blocks make a plan document of about",
                      "past what execute --plan reads (16 MiB, 1,000,000 values)", "use at most 336")


def test_the_largest_allowed_plan_reads_back(tmp_path):
    # 336 blocks, the most the refusal above allows: the document execute --plan reads is within both bounds.
    out = tmp_path / "plan.json"
    result = run_cli("plan", "--model", "qwen3-next-80b", "--p-tp", "1", "--d-tp", "8", "--request-blocks", "336",
                     "--output", str(out))
    assert result.code == 0, result.stderr
    text = out.read_text()
    assert len(text.encode()) <= MAX_FILE_BYTES
    document = parse_json(text, "plan.json")          # raises past MAX_NODES values
    assert len(document["descriptors"]["request"]["decode_blocks"][0]) == 336
    assert_user_error(run_cli("plan", "--model", "qwen3-next-80b", "--p-tp", "1", "--d-tp", "8",
                              "--request-blocks", "337"), "use at most 336")
    assert MAX_NODES == 1_000_000


def test_listed_blocks_count_too():
    blocks = ",".join(str(i) for i in range(6_000))     # mamba-130m 1:2 reads back up to 4338
    assert_user_error(run_cli("plan", "--model", "mamba-130m", "--p-tp", "1", "--d-tp", "2", "--decode-blocks",
                              blocks), "6000 request blocks make a plan document")


def test_a_bare_config_json_is_named_after_its_folder(tmp_path):
    folder = tmp_path / "my-checkout"
    folder.mkdir()
    shutil.copy(FIXTURES / "Qwen__Qwen3.5-0.8B.partial.json", folder / "config.json")
    for name in ("config.json", "./config.json"):
        result = run_cli("plan", "--model", name, "--p-tp", "3", "--d-tp", "1", cwd=str(folder))
        assert_refused(result, "error: vLLM does not start a TP-3 engine of my-checkout")
    shown = run_cli("inspect", "--model", "config.json", "--format", "json", cwd=str(folder))
    assert shown.code == 0 and json.loads(shown.stdout)["model"]["name"] == "my-checkout"
    table = run_cli("preflight", "--prefill", "vllm serve config.json -tp 3 --hf-overrides.x=1", "--decode",
                    "vllm serve config.json", cwd=str(folder))
    assert "tp-layout: vLLM does not start a TP-3 engine of my-checkout" in " ".join(table.stdout.split())
    assert "( preset)" not in table.stdout
