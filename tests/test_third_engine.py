"""The seam proven with a third engine: a toy package (``tests/third_engine/toy_engine``), installed as
a distribution that declares it under ``mambaxfer.engines``, answers ``plan``, ``check``, ``execute``
and ``bench`` through the ``ServingEngine`` protocol alone, with no edit outside its package. A
planted fault (one layer written 8 bytes early) makes its proof and its real transfer fail."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from cli_run import assert_user_error, run_cli, run_json

ROOT = Path(__file__).resolve().parents[1]
TOY = Path(__file__).resolve().parent / "third_engine"
MODEL = str(ROOT / "examples" / "models" / "toy-mamba2.yaml")     # 4 SSM layers
LAYERS = 4
STATE_BYTES = 10496            # one layer's whole state of the toy Mamba2
D_SLOTS = 3                    # a D rank's slots per layer (toy_engine.plan)
FAULT = {"TOY_ENGINE_FAULT": "layer:2"}


@pytest.fixture
def toy(tmp_path: Path) -> dict[str, str]:
    """The environment of a CLI that finds the toy installed: its package on the path, and a
    distribution whose entry point names it."""
    dist = tmp_path / "toy_engine-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-engine\nVersion: 0\n")
    (dist / "entry_points.txt").write_text("[mambaxfer.engines]\ntoy = toy_engine\n")
    path = [str(TOY), str(tmp_path), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {"PYTHONPATH": os.pathsep.join(path), "TOY_ENGINE_FAULT": ""}


def toy_json(command: str, env: dict[str, str], *args: str) -> tuple[int, dict]:
    return run_json(command, "--engine", "toy", "--model", MODEL, "--format", "json", *args, env=env)


def test_plan_one_write_per_layer_per_d_rank(toy):
    code, doc = toy_json("plan", toy, "--p-tp", "2", "--d-tp", "3")
    assert code == 0 and doc["engine"] == "toy" and doc["state_bytes"] == STATE_BYTES
    assert len(doc["writes"]) == LAYERS * 3
    assert sorted((w["d_rank"], w["layer"]) for w in doc["writes"]) == [(d, n) for d in range(3) for n in range(4)]
    assert all(w["p_rank"] == w["d_rank"] % 2 and w["length"] == STATE_BYTES for w in doc["writes"])
    table = run_cli("plan", "--engine", "toy", "--model", MODEL, "--p-tp", "2", "--d-tp", "3", env=toy)
    assert table.code == 0 and "one WRITE per D rank" in " ".join(table.stdout.split())


def test_check_proves_every_byte_and_sees_the_planted_fault(toy):
    code, doc = toy_json("check", toy, "--pairs", "1:2,3:2")
    assert code == 0 and doc["verified"]
    pairings = doc["models"][0]["pairings"]
    assert [(p["pairing"], p["writes"], p["wrong_bytes"]) for p in pairings] == [("1:2", 8, 0), ("3:2", 8, 0)]
    assert all(p["bytes_checked"] == 2 * LAYERS * D_SLOTS * STATE_BYTES for p in pairings)
    code, doc = toy_json("check", {**toy, **FAULT}, "--pairs", "1:2,3:2")
    assert code == 1 and not doc["verified"]
    assert all(p["wrong_bytes"] > 0 for p in doc["models"][0]["pairings"])


def test_execute_writes_every_layer_between_real_ranks(toy, nixl):
    code, doc = toy_json("execute", toy, "--p-tp", "2", "--d-tp", "3", "--device", "cpu", "--timeout", "90")
    assert code == 0 and doc["verified"] and doc["wrong_bytes"] == 0
    assert doc["writes"] == LAYERS * 3 and doc["bytes_per_round"] == LAYERS * 3 * STATE_BYTES
    assert doc["bytes_checked"] == 3 * LAYERS * D_SLOTS * STATE_BYTES
    code, doc = toy_json("execute", {**toy, **FAULT}, "--p-tp", "1", "--d-tp", "2", "--device", "cpu",
                         "--timeout", "90")
    assert code == 1 and not doc["verified"] and doc["wrong_bytes"] > 0


def test_bench_times_every_round_verified(toy, nixl):
    code, doc = toy_json("bench", toy, "--p-tp", "2", "--d-tp", "1", "--iters", "3", "--timeout", "90")
    assert code == 0 and doc["verified"] and doc["rounds"] == 3 and doc["median_s"] > 0
    assert doc["bytes_checked"] == 3 * LAYERS * D_SLOTS * STATE_BYTES


def test_what_the_toy_does_not_answer_is_one_line(toy):
    for args in (("inspect", "--model", MODEL, "--tp", "1"), ("preflight", "--prefill", "x", "--decode", "y"),
                 ("conformance", "--model", MODEL)):
        assert_user_error(run_cli(args[0], "--engine", "toy", *args[1:], env=toy),
                          "toy answers plan, check, execute and bench only")
    assert_user_error(run_cli("check", "--engine", "toy,vllm", "--model", MODEL, "--pairs", "1:1", env=toy),
                      "toy answers plan, check, execute and bench only")


def test_without_its_distribution_the_toy_is_unknown(toy, tmp_path):
    (tmp_path / "toy_engine-0.dist-info" / "entry_points.txt").unlink()
    assert_user_error(run_cli("plan", "--engine", "toy", "--model", MODEL, "--p-tp", "1", "--d-tp", "1", env=toy),
                      "unknown serving engine 'toy'; mambaxfer knows sglang, vllm")


def test_a_built_in_engine_does_not_look_for_installed_ones():
    from mambaxfer_cli import engines

    engines.installed.cache_clear()
    engines.chosen("vllm,sglang")
    assert engines.installed.cache_info().misses == 0


def test_only_the_toy_package_knows_the_toy():
    named = re.compile(r"\btoy(_engine)?\b(?!-)", re.IGNORECASE)     # toy-mamba2 is a model
    knowing = [str(p.relative_to(ROOT)) for p in (ROOT / "mambaxfer_cli").rglob("*.py") if named.search(p.read_text())]
    assert knowing == []
