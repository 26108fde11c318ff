"""The release and the GPU on the command line: every command takes them, names them first and
records them; the default follows the vLLM installed beside mambaxfer (read from its package
metadata), else the newest release mambaxfer knows."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from cli_run import assert_user_error, run_cli


def run_json(*args: str, env: dict | None = None) -> tuple[int, dict]:
    result = run_cli(*args, "--format", "json", env=env)
    assert "Traceback" not in result.stderr, result.stderr
    return result.code, json.loads(result.stdout)


def fake_install(tmp_path, version: str) -> dict:
    """An environment where ``importlib.metadata`` finds vllm ``version`` (nothing to import)."""
    info = tmp_path / f"vllm-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}


PLAN = ("plan", "--model", "qwen3.5-0.8b", "--semantics", "vllm")


def test_plan_names_the_release_first_and_records_it():
    # Qwen3.5-0.8B 4P2D without prefix caching: 272 -> 544 in vLLM 0.33 (accepted), 320 vs 576 in 0.34.
    args = (*PLAN, "--p-tp", "4", "--d-tp", "2", "--no-enable-prefix-caching")
    old = run_cli(*args, "--vllm-version", "0.33")
    assert old.code == 0 and old.stdout.startswith("vLLM 0.33 accepts this pairing")
    new = run_cli(*args, "--vllm-version", "0.34")
    assert new.stdout.startswith("vLLM 0.34 refuses this pairing at handshake: Local block size 576 is not "
                                 "divisible by remote block size 320")
    assert "vLLM 0.34 on H100 (SM 9.0, CUDA 13)" in new.stdout
    _, doc = run_json(*args, "--vllm-version", "0.34")
    assert doc["vllm_versions"] == {"prefill": "0.34", "decode": "0.34"}
    assert doc["gpu"] == {"prefill": "H100", "decode": "H100"} and doc["vllm"]["releases"] == "vLLM 0.34"
    assert [doc["engines"][s]["vllm_version"] for s in ("prefill", "decode")] == ["0.34", "0.34"]


def test_plan_with_two_releases_is_refused_by_the_hash():
    code, doc = run_json(*PLAN, "--p-tp", "1", "--d-tp", "1", "--p-vllm-version", "0.33",
                         "--d-vllm-version", "0.34.1")
    assert doc["vllm_versions"] == {"prefill": "0.33", "decode": "0.34"}
    assert doc["vllm"]["releases"] == "vLLM 0.33 (P) / 0.34 (D)"
    assert [r["code"] for r in doc["vllm"]["refusals"]][0] == "compat-hash"
    result = run_cli(*PLAN, "--p-tp", "1", "--d-tp", "1", "--p-vllm-version", "0.33", "--d-vllm-version", "0.34")
    assert result.stdout.startswith("vLLM 0.33 (P) / 0.34 (D) refuses this pairing at handshake: NIXL "
                                    "compatibility hash mismatch.")


def test_the_gpu_is_in_the_header_and_the_geometry():
    result = run_cli("plan", "--model", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "4", "--gpu", "B200",
                     "--attention-backend", "FLASH_ATTN", "--vllm-version", "0.34")
    assert "vLLM 0.34 on B200 (SM 10.0, CUDA 13)" in result.stdout
    # FA4's 128-token kernel blocks for head size 256: 640 and 384 tokens.
    _, doc = run_json("inspect", "--model", "qwen3.5-0.8b", "--tp", "1,4", "--gpu", "B200",
                      "--attention-backend", "FLASH_ATTN")
    assert [doc["engines"][tp]["block_size"] for tp in ("1", "4")] == [640, 384]
    assert [doc["engines"][tp]["kernel_block_size"] for tp in ("1", "4")] == [128, 128]
    assert doc["gpu"] == "B200"


@pytest.mark.parametrize("installed, answered, note", [
    ("0.33.0", "vLLM 0.33", None),
    ("0.34.0", "vLLM 0.34", None),
    ("0.36.1", "vLLM 0.34", "note: vLLM 0.36.1 is installed, newer than the releases mambaxfer knows"),
])
def test_the_default_release_is_the_installed_vllms(tmp_path, installed, answered, note):
    env = fake_install(tmp_path, installed)
    result = run_cli("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "2", env=env)
    assert result.code == 0 and result.stdout.startswith(f"{answered} accepts"), result.stdout[:200]
    if note is None:
        assert "note:" not in result.stderr
    else:
        assert result.stderr.count(note) == 1     # said once, though both engines take the default
    # An explicit release wins over the installed one.
    assert run_cli("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "2", "--vllm-version", "0.33",
                   env=env).stdout.startswith("vLLM 0.33 accepts")


@pytest.mark.parametrize("command", [
    ("inspect", "--model", "jamba"),
    ("check", "--model", "jamba", "--pairs", "1:2"),
    ("preflight", "--prefill", "vllm serve jamba", "--decode", "vllm serve jamba"),
    ("execute", "--model", "jamba", "--p-tp", "1", "--d-tp", "2"),
    ("bench", "--model", "jamba", "--p-tp", "1", "--d-tp", "2"),
])
def test_every_command_takes_the_release_and_refuses_unknown_ones(command):
    assert_user_error(run_cli(*command, "--vllm-version", "0.32"),
                      "--vllm-version 0.32: unknown vLLM release '0.32'; mambaxfer knows 0.33, 0.34")
    assert_user_error(run_cli(*command, "--gpu", "K80"), "--gpu: unknown GPU 'K80'")


def test_execute_with_a_plan_file_takes_its_engines_from_the_file(tmp_path):
    target = tmp_path / "plan.json"
    assert run_cli("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "2", "--p-num-blocks", "64",
                   "--d-num-blocks", "64", "--vllm-version", "0.33", "-o", str(target)).code == 0
    assert json.loads(target.read_text())["vllm_versions"]["decode"] == "0.33"
    assert_user_error(run_cli("execute", "--plan", str(target), "--vllm-version", "0.34"),
                      "--vllm-version: the plan file fixes both engines")


@pytest.mark.parametrize("version", ["0.33", "0.34"])
@pytest.mark.parametrize("semantics", ["exact", "vllm"])
def test_check_all_presets_per_release_and_semantics(version, semantics):
    code, doc = run_json("check", "--all-presets", "--semantics", semantics, "--vllm-version", version)
    assert doc["vllm_versions"] == {"prefill": version, "decode": version}
    verdicts = Counter(r["verdict"] for r in doc["results"])
    if semantics == "exact":
        # mambaxfer's own plan is right for every pairing of every preset, whatever vLLM says of it.
        assert code == 0 and set(verdicts) == {"pass"}
        return
    # vLLM's own reads: the only wrong bytes are Granite's replicated B/C groups (vLLM's offsets,
    # upstream #55208); every pairing vLLM accepts otherwise passes, attention included (the
    # post-receive rearrangement), and the rest are refusals with vLLM's message.
    failed = {(r["model"], tuple(sorted({d["region"] for d in r["damage"]}))) for r in doc["results"]
              if r["verdict"] == "fail"}
    assert code == 1 and failed == {("granite-4.0-h-tiny", ("B", "C"))}
    assert verdicts["pass"] > 0 and verdicts["refused"] > 0
    assert all(r["vllm"]["releases"] == f"vLLM {version}" for r in doc["results"])


def _examples(text: str) -> list[tuple[str, list[str]]]:
    """The ``$ mambaxfer ...`` blocks of a document (4-space indented) with the lines they show;
    commands with a comment (a set-up the reader does) and '...' lines are left out."""
    out: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        body = line[4:] if line.startswith("    ") else None
        if body is not None and body.startswith("$ mambaxfer "):
            out.append((body[2:], []))
        elif body is not None and out and body.strip() and not body.startswith("$"):
            out[-1][1].append(body.rstrip())
        elif not line.strip() or body is None:
            continue
    return [(cmd, [x for x in shown if x.strip() != "..."]) for cmd, shown in out if "#" not in cmd]


def test_the_release_guides_examples_are_real_output():
    import shlex
    from pathlib import Path

    text = (Path(__file__).parent.parent / "docs" / "releases.md").read_text()
    examples = _examples(text)
    assert len(examples) >= 6
    for command, shown in examples:
        words = shlex.split(command)[1:]
        result = run_cli(*words, env={"COLUMNS": "80"})
        printed = [line.rstrip() for line in result.stdout.splitlines()]
        for line in shown:
            assert line in printed, (command, line)


@pytest.mark.parametrize("semantics, ratio", [("vllm", 2), ("exact", 1)])
def test_a_source_read_for_ssm_state_only_numbers_its_ids_as_vllm_registers_them(semantics, ratio):
    """Qwen3.5-0.8B 4P2D, prefix caching off, vLLM 0.33: P's kernel block is 272 tokens, D's 544
    (ratio 2), and D0 reads attention from P0 only, SSM state from P0 and P1. vLLM registers every
    per-source local list at P's block size (add_remote_agent -> register_local_xfer_handler with the
    remote block size; _build_local_splits_from_plan), so P1's SSM IDs come after F x N x 2 attention
    descriptors: F = 6 tensors, N = 100,000 blocks. mambaxfer's exact list keeps whole kernel blocks."""
    code, document = run_json("plan", "--model", "qwen3.5-0.8b", "--p-tp", "4", "--d-tp", "2",
                              "--no-enable-prefix-caching", "--vllm-version", "0.33", "--semantics", semantics,
                              "--show", "all")
    ids = document["descriptors"]
    assert (ids["decode"]["tensors"], ids["decode"]["num_blocks"]) == (6, 100_000)
    read = next(r for r in ids["reads"] if (r["d_rank"], r["p_rank"]) == (0, 1))
    assert min(read["local_ids"]) == 6 * 100_000 * ratio + 53_075     # 53,075: the same SSM descriptor after them
