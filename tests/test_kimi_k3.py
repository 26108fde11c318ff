"""Kimi-K3 (dense MLA) as vLLM 0.33 and 0.34 serve it, and Kimi-K3.1 (DSA) as they refuse it.

No public Kimi-K3 config exists: ``kimi-k3.example.json`` is an example whose dimensions come from
the shapes vLLM's specialized K3 decode hard-codes (hidden 7168, 96 attention and 96 KDA heads of
128, latent 512 + 64 rope, q-LoRA 1536), with an assumed layer count and pattern (64 layers, every
4th MLA). ``kimi-k3.1.example.json`` is the same with a ``dsa_config`` on those MLA layers.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from cli_run import assert_refused, run_cli
from mambaxfer_cli.engines.vllm.engine import engine_layout
from mambaxfer_cli.engines.vllm.geometry import EngineFlags
from mambaxfer_cli.engines.vllm.gpu import gpu as gpu_named
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.engines.vllm.kv_groups import model_grouping
from mambaxfer_cli.engines.vllm.proof.check import check_pairing
from plan_options import check_options
from mambaxfer_cli.proof.verdicts import Pairing
from mambaxfer_cli.readers.model_config import spec_from_config

FIXTURES = Path(__file__).parent / "fixtures" / "hf-configs"
K3 = FIXTURES / "kimi-k3.example.json"
K31 = FIXTURES / "kimi-k3.1.example.json"
LATENT = 512 + 64            # kv_lora_rank + qk_rope_head_dim, one vector per token


def k3(**overrides):
    return spec_from_config(json.loads(K3.read_text()), name="kimi-k3", source=str(K3), **overrides)


def expected_block(tp: int, ssm_bytes: int = 4) -> int:
    """_align_hybrid_block_size by hand: the KDA state m (conv 3·96·128/T channels of 3 bf16 rows,
    SSM 96/T heads of 128×128), in blocks of at least 128 tokens (the MLA floor) of 1152 B each."""
    conv = 3 * 96 * 128 // tp * 3 * 2
    ssm = 96 // tp * 128 * 128 * ssm_bytes
    return 128 * math.ceil((conv + ssm) / (128 * LATENT * 2))


def test_the_composite_config_reads_as_kimi_linears_model():
    model = k3()
    assert (model.family, model.variant, dict(model.params), model.conv_kernel) == (
        "Kimi-K3", "kda", {"num_heads": 96, "head_dim": 128}, 4)
    assert (model.ssm_layers, model.attention_layers) == (48, 16)
    assert model.layers[3] == "attention" and model.layers[:3] == ("ssm",) * 3
    assert (model.mla, model.num_kv_heads, model.head_size, model.num_q_heads) == (True, 1, LATENT, 96)
    assert (model.conv_dtype, model.ssm_dtype, model.ssm_backend) == ("bfloat16", "float32", "KIMI_K3_KDA")


@pytest.mark.parametrize("tp, block", [(1, 5760), (2, 2944), (4, 1536), (8, 768)])
def test_blocks_on_h100_are_kimi_linears_rule_with_k3s_numbers(tp, block):
    model = k3()
    side = engine_layout(model, tp, EngineFlags(gpu=gpu_named("H100")), model_grouping(model))
    assert block == expected_block(tp)
    assert (side.geometry.block_size, side.page_bytes) == (block, block * LATENT * 2)
    assert side.geometry.state_bytes == 3 * 96 * 128 // tp * 3 * 2 + 96 // tp * 128 * 128 * 4
    assert side.geometry.attention_backend == "FLASH_ATTN_MLA"


def test_the_full_rank_gate_layer_reads_the_ssm_cache_dtype():
    """KimiK3DeltaAttention.get_state_dtype and the class both take --mamba-ssm-cache-dtype
    (kda_state_dtype): a bfloat16 state halves the SSM part and the blocks follow it."""
    bf16 = k3(ssm_dtype="bfloat16")
    assert (bf16.ssm_dtype, bf16.sizing_ssm_dtype, bf16.origin["ssm_dtype"]) == ("bfloat16", "", "--ssm-dtype")
    assert "KimiK3DeltaAttention" in k3().origin["ssm_dtype"]
    for tp, block in ((1, 2944), (2, 1536), (4, 768), (8, 384)):
        side = engine_layout(bf16, tp, EngineFlags(gpu=gpu_named("H100")), model_grouping(bf16))
        assert side.geometry.block_size == block == expected_block(tp, ssm_bytes=2)
    with pytest.raises(UserError, match="KDA recurrent state supports only auto, float32, and bfloat16"):
        k3(ssm_dtype="float16")
    # The layer follows the key, not the architecture: Kimi-Linear's class with it gets it too.
    config = json.loads(K3.read_text())
    linear = spec_from_config({**config["text_config"], "architectures": ["KimiLinearForCausalLM"]},
                              name="kl", source="stand-in", ssm_dtype="bfloat16")
    assert (linear.family, linear.ssm_dtype, linear.ssm_backend) == ("Kimi-Linear", "bfloat16", "KIMI_K3_KDA")


def test_the_hash_takes_the_kimi_k3_kda_backend():
    model = k3()
    side = engine_layout(model, 2, EngineFlags(gpu=gpu_named("H100")), model_grouping(model))
    assert side.hashed_backend == "KIMI_K3_KDA"
    doc = json.loads(run_cli("plan", "--model", str(K3), "--p-tp", "1", "--d-tp", "2", "--show", "all",
                             "--format", "json").stdout)
    assert doc["model"]["params"] == {"num_heads": 96, "head_dim": 128}


@pytest.mark.parametrize("key, value, words", [
    ("mla_use_nope", False, '"Kimi-K3 MLA (MultiHeadLatentAttention) is NoPE-only"'),
    ("qk_nope_head_dim", None, "assert qk_nope_head_dim is not None"),
    ("v_head_dim", None, "assert v_head_dim is not None"),
])
def test_the_mla_layers_asserts_are_vllms(tmp_path, key, value, words):
    config = json.loads(K3.read_text())
    config["text_config"][key] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert_refused(run_cli("plan", "--model", str(path), "--p-tp", "1", "--d-tp", "2"), "vLLM does not start",
                      words, "KimiDecoderLayer.__init__")


@pytest.mark.parametrize("p_tp, d_tp", [(1, 2), (2, 1), (1, 4)])
def test_plan_names_both_engines(p_tp, d_tp):
    doc = json.loads(run_cli("plan", "--model", str(K3), "--p-tp", str(p_tp), "--d-tp", str(d_tp), "--gpu", "H100",
                             "--format", "json").stdout)
    blocks = {1: 5760, 2: 2944, 4: 1536}
    assert (doc["engines"]["prefill"]["block_size"], doc["engines"]["decode"]["block_size"]) == (
        blocks[p_tp], blocks[d_tp])
    assert not doc["vllm"]["accepts"] and "physical_blocks_per_logical" in doc["vllm"]["refusals"][0]["message"]
    assert doc["engines"]["prefill"]["attention_bytes_per_token"] == LATENT * 2


@pytest.mark.parametrize("p_tp, d_tp", [(1, 2), (2, 1), (1, 4)])
def test_check_proves_every_byte(p_tp, d_tp):
    # Prefix caching off: vLLM refuses P's split blocks with it on, as Kimi-Linear's (the plan says).
    flags = EngineFlags(prefix_caching=False)
    for semantics in ("vllm", "exact"):
        options = check_options(semantics=semantics, prefill=flags, decode=flags, request_blocks=2)
        result = check_pairing(k3(), Pairing(p_tp, d_tp), options)
        assert result.verdict == "pass" and result.simulation.ok, result.explanation()


def test_check_command_passes():
    result = run_cli("check", "--model", str(K3), "--pairs", "1:2,2:1,1:4", "--no-enable-prefix-caching",
                     "--format", "json")
    assert result.code == 0, result.stdout[-2000:] + result.stderr[-2000:]


@pytest.mark.usefixtures("nixl")
def test_execute_moves_every_byte_over_nixl():
    # --layers 4: three KDA layers and an MLA layer.
    result = run_cli("execute", "--model", str(K3), "--layers", "4", "--p-tp", "1", "--d-tp", "2", "--device", "cpu",
                     "--format", "json", "--timeout", "120", "--iters", "1", "--no-enable-prefix-caching")
    assert result.code == 0, result.stdout[-2000:] + result.stderr[-2000:]
    doc = json.loads(result.stdout)
    assert doc["verified"] and len(doc["decode"]) == 2
    for d in doc["decode"]:
        assert d["verdict"]["ok"] and d["verdict"]["wrong_bytes"] == 0 and d["verdict"]["checked_bytes"] > 0


K31_WORDS = ("vLLM 0.34 serves Kimi-K3.1 (KimiK31ForConditionalGeneration), but its NIXL connector refuses its KV "
             "cache when each worker registers it: AssertionError: KV cache view cannot be partitioned into NIXL "
             "regions", "register_kv_caches", "_sync_block_size_with_kernel", "64-token kernel block")


def test_kimi_k3_1_is_refused_as_vllm_0_34s_connector_refuses_it():
    assert_refused(run_cli("plan", "--model", str(K31), "--p-tp", "1", "--d-tp", "2", "--vllm-version", "0.34"),
                      *K31_WORDS)
    assert_refused(run_cli("check", "--model", str(K31), "--vllm-version", "0.34"), *K31_WORDS)


def test_kimi_k3_1_under_0_33_is_an_architecture_its_registry_lacks():
    words = ("vLLM 0.33 does not serve KimiK31ForConditionalGeneration: \"Model architectures "
             "['KimiK31ForConditionalGeneration'] are not supported for now\"", "vLLM 0.34 serves it")
    assert_refused(run_cli("plan", "--model", str(K31), "--p-tp", "1", "--d-tp", "2", "--vllm-version", "0.33"),
                      *words)
    # One engine on 0.33 is enough.
    assert_refused(run_cli("plan", "--model", str(K31), "--p-tp", "1", "--d-tp", "2", "--d-vllm-version", "0.33",
                              "--p-vllm-version", "0.34"), *words)
    # Kimi-K3 itself is served by both.
    assert run_cli("plan", "--model", str(K3), "--p-tp", "1", "--d-tp", "2", "--vllm-version", "0.33").code == 0


def serve(path: Path, tp: int, role: str) -> str:
    transfer = json.dumps({"kv_connector": "NixlConnector", "kv_role": role})
    return f"VLLM_SSM_CONV_STATE_LAYOUT=DS vllm serve {path.parent} -tp {tp} --kv-transfer-config '{transfer}'"


@pytest.mark.parametrize("release, words", [("0.34", K31_WORDS[:1]), ("0.33", ("vLLM 0.33 does not serve",))])
def test_preflight_refuses_kimi_k3_1(tmp_path, release, words):
    path = tmp_path / "k31" / "config.json"
    path.parent.mkdir()
    path.write_text(K31.read_text())
    result = run_cli("preflight", "--prefill", serve(path, 1, "kv_producer"), "--decode",
                     serve(path, 2, "kv_consumer"), "--vllm-version", release)
    assert_refused(result, "--prefill:", *words)


def test_preflight_accepts_kimi_k3_with_prefix_caching_off(tmp_path):
    path = tmp_path / "k3" / "config.json"
    path.parent.mkdir()
    path.write_text(K3.read_text())
    result = run_cli("preflight", "--prefill", serve(path, 1, "kv_producer") + " --no-enable-prefix-caching",
                     "--decode", serve(path, 2, "kv_consumer") + " --no-enable-prefix-caching", "--format", "json")
    assert result.code == 0, result.stdout[-2000:]
    doc = json.loads(result.stdout)
    assert doc["verdict"] == "works" and doc["engines"]["decode"]["ssm_dtype"] == "float32"
