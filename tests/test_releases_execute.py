"""``execute`` for each release: real NIXL READs between rank processes, every byte verified, on
every preset with attention, and vLLM's reads across unequal kernel blocks through its
post-receive rearrangement."""

from __future__ import annotations

import json

import pytest

from cli_run import run_cli, vllm_presets
from mambaxfer_cli.execute.tasks import cut_layers
from mambaxfer_cli.engines.vllm.geometry import EngineFlags
from mambaxfer_cli.engines.vllm.plan import PlanOptions, build_plan
from mambaxfer_cli.engines.vllm.releases import release
from mambaxfer_cli.readers.model_source import load_model
from rank_processes import assert_no_rank_left, new_tag

pytestmark = pytest.mark.usefixtures("nixl")

# The first layers of each preset with attention that hold one attention layer (one KV-cache
# tensor or few): small pages, a run of a few seconds.
WITH_ATTENTION = [name for name in vllm_presets() if load_model(name).has_attention]
LAYERS = {"jamba": 8, "granite-4.0-h-tiny": 6, "kimi-linear-48b": 8, "nemotron-h-8b": 8, "qwen3.5-0.8b": 4,
          "qwen3-next-80b": 4, "qwen3.8-flash-next": 4, "glm-5-next": 4}


def execute_json(*args: str) -> tuple[int, dict]:
    env = new_tag()
    result = run_cli("execute", "--device", "cpu", "--format", "json", "--timeout", "120", "--iters", "1", *args,
                     env=env)
    assert result.code in (0, 1), result.stdout + result.stderr
    assert_no_rank_left(env)
    return result.code, json.loads(result.stdout)


def test_every_preset_with_attention_is_covered():
    assert set(WITH_ATTENTION) == set(LAYERS)


@pytest.mark.parametrize("version", ["0.33", "0.34"])
@pytest.mark.parametrize("model", WITH_ATTENTION)
def test_execute_verifies_every_byte_for_each_release(model, version):
    code, doc = execute_json("--model", model, "--p-tp", "1", "--d-tp", "2", "--layers", str(LAYERS[model]),
                             "--vllm-version", version, "--semantics", "exact")
    assert code == 0 and doc["verified"], doc
    assert doc["vllm_versions"] == {"prefill": version, "decode": version}


@pytest.mark.parametrize("version", ["0.33", "0.34"])
def test_vllm_reads_across_unequal_kernel_blocks_verify_after_the_rearrangement(tmp_path, version):
    # P --block-size 576, D 1152 (equal TP): each P kernel block lands in one half of a D block that
    # holds both KV heads; D's memory is checked as vLLM holds it before kv_postprocess_blksize_on_receive.
    spec = cut_layers(load_model("qwen3.5-0.8b"), 4)
    rel = release(version)
    options = PlanOptions(semantics="vllm", prefill=EngineFlags(release=rel, block_size=576, num_blocks=16),
                          decode=EngineFlags(release=rel, block_size=1152, num_blocks=8), request_blocks=2)
    plan = build_plan(spec, 1, 1, options)
    assert plan.verdict.accepts and plan.received_sub_blocks == 2
    target = tmp_path / "plan.json"
    target.write_text(json.dumps(plan.to_dict()))
    code, doc = execute_json("--plan", str(target))
    assert code == 0 and doc["verified"], doc
