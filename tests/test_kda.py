"""KDA with MLA (Kimi-Linear): the state vLLM builds (kda_state_shape, kda_state_dtype), the latent KV
per token replicated across TP, and the hybrid MLA handshake (_split_remote_blocks, DCP sizes, block
lengths). Numbers below follow vLLM's formulas, written out here from the released config."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from cli_run import assert_refused, run_cli
from mambaxfer_cli.engines.vllm.engine import engine_layout
from mambaxfer_cli.engines.vllm.geometry import EngineFlags, kernel_backend
from mambaxfer_cli.engines.vllm.gpu import gpu as gpu_named
from mambaxfer_cli.engines.vllm.handshake import split_remote_blocks
from mambaxfer_cli.engines.vllm.plan import PlanOptions, build_plan
from mambaxfer_cli.engines.vllm.release import Meeting, dcp_sizes, mla_block_lens
from mambaxfer_cli.engines.vllm.releases import release as release_named
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.engines.vllm.kv_groups import vllm_grouping
from mambaxfer_cli.planning.layout import rank_layout
from mambaxfer_cli.engines.vllm.proof.check import check_pairing
from plan_options import check_options
from mambaxfer_cli.proof.verdicts import Pairing
from mambaxfer_cli.engines.vllm.proof.simulate import simulate
from mambaxfer_cli.readers.model_config import spec_from_config
from mambaxfer_cli.readers.model_source import load_model

HF = Path(__file__).parent / "fixtures" / "hf-configs" / "moonshotai__Kimi-Linear-48B-A3B-Instruct.partial.json"
H, D, K = 32, 128, 4            # linear_attn_config: num_heads, head_dim, short_conv_kernel_size
LATENT = 512 + 64               # kv_lora_rank + qk_rope_head_dim


def kimi(**overrides):
    return spec_from_config(json.loads(HF.read_text()), name="kimi", source=str(HF), **overrides)


def test_the_released_config_and_the_preset_read_alike():
    model, preset = kimi(), load_model("kimi-linear-48b")
    assert (model.variant, model.family) == ("kda", "Kimi-Linear")
    assert model.params == preset.params == {"num_heads": H, "head_dim": D}
    assert model.layers == preset.layers
    # 1-based kda_layers: full_attn_layers [4, 8, ..., 24, 27] are the MLA ones.
    assert [i + 1 for i, kind in enumerate(model.layers) if kind == "attention"] == [4, 8, 12, 16, 20, 24, 27]
    assert (model.mla, model.num_kv_heads, model.head_size, model.num_q_heads) == (True, 1, LATENT, 32)


@pytest.mark.parametrize("tp, spec", [(1, 0), (2, 0), (4, 2)])
def test_state_is_kda_state_shape(tp, spec):
    # kda_state_shape: conv (3·H·d/T, K−1+s) in the model dtype; SSM (H/T, d, d) in float32.
    model = kimi(num_spec=spec)
    layout = rank_layout(model, tp, tp - 1)
    assert layout.conv_bytes == 3 * H * D // tp * (K - 1 + spec) * 2
    assert layout.ssm_bytes == H // tp * D * D * 4
    # The connector splits the conv state as GDN's: Q | K | V, each H·d/T channels.
    assert [len(r.shard) for r in layout.regions] == [H * D // tp] * 3 + [H // tp]


def test_ssm_dtype_is_kda_state_dtype():
    assert kimi().ssm_dtype == "float32"
    assert kimi(ssm_dtype="float32").sizing_ssm_dtype == ""
    with pytest.raises(UserError, match="KDA recurrent state supports only auto, float32, and bfloat16"):
        kimi(ssm_dtype="float16")


def test_mla_has_no_heads_to_override():
    with pytest.raises(UserError, match="MLA model"):
        kimi(kv_heads=4)


def test_latent_page_is_one_vector_per_token_on_every_rank():
    model = kimi()
    for tp in (1, 2, 4):
        layout = engine_layout(model, tp, EngineFlags(), vllm_grouping(model.layers))
        assert layout.geometry.attention_bytes_per_token == LATENT * 2       # MLAAttentionSpec: no V
        assert {(h.start, h.end) for h in layout.kv_heads} == {(0, 1)}      # replicated whole
        assert layout.geometry.attention_backend == "FLASH_ATTN_MLA"
    fp8 = engine_layout(model, 2, EngineFlags(kv_cache_dtype="fp8"), vllm_grouping(model.layers))
    assert fp8.geometry.attention_bytes_per_token == LATENT


def test_mla_backends():
    assert kernel_backend(None, gpu_named("B200"), LATENT, "auto", mla=True).name == "FLASHINFER_MLA"
    assert kernel_backend(None, gpu_named("A100"), LATENT, "auto", mla=True).name == "TRITON_MLA"
    with pytest.raises(UserError, match="does not run an MLA model"):
        kernel_backend("FLASH_ATTN", gpu_named("H100"), LATENT, "auto", mla=True)
    with pytest.raises(UserError, match="does not run a non-MLA model"):
        kernel_backend("FLASHMLA", gpu_named("H100"), 128, "auto")


def test_hybrid_mla_blocks_align_to_128_tokens():
    # _align_hybrid_block_size: max(kernel, block size, 128) for MLA. At TP 4 the state is 542720 B;
    # 16-token steps would give 480 tokens, the 128 floor gives 512.
    model = kimi()
    flags = EngineFlags(release=release_named("0.33"))
    layout = engine_layout(model, 4, flags, vllm_grouping(model.layers))
    assert layout.geometry.state_bytes == 542720
    assert layout.geometry.block_size == 512


def test_decode_splits_prefill_blocks_at_their_gcd():
    # 1P2D: P's blocks hold 1920 tokens, D's 1024; D views P's as 15 blocks of gcd = 128 tokens.
    model = kimi()
    plan = build_plan(model, 1, 2, PlanOptions(semantics="vllm"))
    p = plan.prefill.geometry
    assert (p.block_size, p.kernel_block_size, p.blocks_per_logical, p.split_by_remote) == (1920, 128, 15, 15)
    assert plan.decode.geometry.block_size == 1024
    codes = [r.code for r in plan.verdict.refusals]
    assert codes == ["prefix-caching"] and "Remote: 15" in plan.verdict.refusals[0].message
    assert "vllm-splits-blocks" in [w.code for w in plan.warnings]
    # Push mode does not split.
    unsplit = engine_layout(model, 1, EngineFlags(), plan.grouping)
    assert split_remote_blocks(unsplit, plan.decode, "push") is unsplit


@pytest.mark.parametrize("p_tp, d_tp", [(1, 2), (2, 1), (1, 4)])
def test_vllm_moves_the_right_bytes_without_prefix_caching(p_tp, d_tp):
    flags = EngineFlags(prefix_caching=False)
    options = check_options(semantics="vllm", prefill=flags, decode=flags, request_blocks=2)
    result = check_pairing(kimi(), Pairing(p_tp, d_tp), options)
    assert result.verdict == "pass", result.explanation()


def test_each_d_rank_reads_the_latent_whole_from_one_p_rank():
    plan = build_plan(kimi(), 2, 1, PlanOptions(semantics="vllm", prefill=EngineFlags(prefix_caching=False),
                                                 decode=EngineFlags(prefix_caching=False)))
    attention = [r for r in plan.descriptors.reads if r.attention]
    assert [r.p_rank for r in attention] == [0]                 # compute_tp_mapping: MLA, one source
    assert sorted(r.p_rank for r in plan.descriptors.reads) == [0, 1]   # SSM from both


def test_a_latent_read_short_by_one_token_is_caught():
    # A planted fault: D reads one token less of each P block's latent than it should.
    flags = EngineFlags(prefix_caching=False)
    plan = build_plan(kimi(), 1, 2, check_options(semantics="vllm", prefill=flags, decode=flags))
    assert simulate(plan).ok
    reads = plan.descriptors.reads
    first = reads[0]
    unit = plan.prefill.head_token_bytes
    short = tuple((offset, size - unit) for offset, size in first.remote.attention)
    broken = replace(first, remote=replace(first.remote, attention=short),
                     local=replace(first.local, attention=tuple((o, s - unit) for o, s in first.local.attention)))
    plan = replace(plan, descriptors=replace(plan.descriptors, reads=(broken,) + reads[1:]))
    assert not simulate(plan).ok


def test_dcp_sizes_must_match_with_mamba_and_block_lengths_scale():
    met = Meeting(mode="pull", local_tp=2, remote_tp=1, has_attention=True, local_kernel=256, remote_kernel=128,
                  local_per_logical=1, remote_per_logical=1, local_prefix_caching=False, attention_sources=1,
                  mla=True, local_block_bytes=256 * 1152, remote_block_bytes=128 * 1152)
    assert dcp_sizes(met) is None and mla_block_lens(met) is None
    assert "require matching DCP sizes, got local=2, remote=1" in dcp_sizes(replace(met, local_dcp=2)).message
    wrong = mla_block_lens(replace(met, remote_block_bytes=128 * 576))
    assert wrong is not None and "block_size_ratio=2" in wrong.message


def test_a_dcp_mismatch_refuses_the_plan():
    model = kimi()
    plan = build_plan(model, 1, 2, PlanOptions(prefill=EngineFlags(block_size=1920, dcp_size=1),
                                               decode=EngineFlags(block_size=1920, dcp_size=2)))
    assert [r.code for r in plan.verdict.refusals] == ["dcp-sizes"]


def test_cli_plan_check_and_errors():
    plan = run_cli("plan", "--model", "kimi-linear-48b", "--p-tp", "1", "--d-tp", "2", "--format", "json")
    doc = json.loads(plan.stdout)
    assert doc["model"]["attention"]["mla"] is True
    assert doc["engines"]["prefill"]["attention_backend"] == "FLASH_ATTN_MLA"
    refused = run_cli("check", "--model", "kimi-linear-48b", "--pairs", "1:2")
    assert refused.code == 1 and "prefix caching" in refused.stdout.lower()
    fixed = run_cli("check", "--model", "kimi-linear-48b", "--pairs", "1:2,2:1,1:4", "--no-enable-prefix-caching")
    assert fixed.code == 0, fixed.stdout + fixed.stderr
    assert_refused(run_cli("plan", "--model", "kimi-linear-48b", "--p-tp", "1", "--d-tp", "2",
                              "--attention-backend", "FLASH_ATTN"), "does not run an MLA model")


def test_preflight_reads_dcp_and_names_the_mla_backend(tmp_path):
    kv = "--kv-transfer-config '{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}'"
    lines = {}
    for side, extra in (("p", "-tp 1"), ("d", "-tp 2 -dcp 2")):
        lines[side] = tmp_path / f"{side}.sh"
        lines[side].write_text(f"VLLM_SSM_CONV_STATE_LAYOUT=DS vllm serve kimi-linear-48b {extra} "
                               f"--no-enable-prefix-caching {kv}\n")
    result = run_cli("preflight", "--prefill-file", str(lines["p"]), "--decode-file", str(lines["d"]))
    assert result.code == 1
    words = " ".join(result.stdout.split())
    assert "require matching DCP sizes, got local=2, remote=1" in words
    assert "FLASH_ATTN_MLA" in words


def test_kda_layers_keep_float32_and_the_flag_only_sizes_the_blocks():
    # KimiGatedDeltaNetAttention.get_state_dtype passes no --mamba-ssm-cache-dtype: the layers keep
    # float32; KimiLinearForCausalLM.get_mamba_state_dtype_from_config passes it: the blocks are sized
    # for a bfloat16 state, too small a page unless --block-size makes it large enough.
    model = kimi(ssm_dtype="bfloat16")
    assert (model.ssm_dtype, model.sizing_ssm_dtype) == ("float32", "bfloat16")
    grouping = vllm_grouping(model.layers)
    with pytest.raises(UserError, match="asserts page_size_padded >= page_size"):
        engine_layout(model, 2, EngineFlags(), grouping)
    big = engine_layout(model, 2, EngineFlags(block_size=1920), grouping)
    assert big.geometry.state_bytes == rank_layout(kimi(), 2, 0).state_bytes
    assert big.geometry.page_bytes == 1920 * LATENT * 2


# Stand-ins with the keys vLLM's classes read (no released configs here): Bailing-V3 and AliceAI.
BAILING = {"architectures": ["BailingMoeV3ForCausalLM"], "model_type": "bailing_hybrid", "torch_dtype": "bfloat16",
           "num_hidden_layers": 10, "layer_group_size": 4, "num_attention_heads": 16, "head_dim": 128,
           "short_conv_kernel_size": 4, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128}
ALICE = {"architectures": ["AliceAIForCausalLM"], "model_type": "alice_ai", "torch_dtype": "bfloat16",
         "num_hidden_layers": 4, "layer_types": ["linear_attention"] * 3 + ["full_attention"],
         "linear_num_key_heads": 32, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
         "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "num_attention_heads": 16,
         "num_key_value_heads": 2, "head_dim": 256}


def test_bailing_v3_layers_and_latent():
    model = spec_from_config(BAILING, name="bailing", source="stand-in", ssm_dtype="bfloat16")
    # _is_kda_layer: every 4th layer and the tail past the last whole group (8, 9) are MLA.
    assert [i for i, kind in enumerate(model.layers) if kind == "attention"] == [3, 7, 8, 9]
    assert (model.family, model.params) == ("Bailing-V3", {"num_heads": 16, "head_dim": 64})
    assert (model.mla, model.head_size, model.ssm_dtype, model.sizing_ssm_dtype) == (True, LATENT, "float32", "")


def test_bailing_v3_kda_head_size_is_qk_rope_head_dim_as_vllm_reads_it():
    """transformers' ``BailingHybridConfig.__post_init__`` sets ``head_dim = qk_rope_head_dim`` (the
    config's own ``head_dim`` becomes ``linear_head_dim``), and vLLM's
    ``_get_kda_state_shape_for_config`` (model_executor/models/bailing_moe_v3.py) and its KDA layer
    read ``config.head_dim``: the example config's 128 is not the KDA head size, 64 is. vLLM's
    ``get_mamba_state_shape_from_config`` at TP 1 gives (36864, 524288) bytes (conv bfloat16, SSM
    float32), at TP 2 half of each (``conformance`` compares them)."""
    model = load_model(str(HF.with_name("bailing-v3.example.json")))
    assert model.params == {"num_heads": 32, "head_dim": 64}
    for tp, conv, ssm in ((1, 3 * 32 * 64 * 3 * 2, 32 * 64 * 64 * 4), (2, 3 * 16 * 64 * 3 * 2, 16 * 64 * 64 * 4)):
        layout = rank_layout(model, tp, 0)
        assert [r.size for r in layout.regions] == [conv // 3] * 3 + [ssm]
    assert rank_layout(model, 1, 0).state_bytes == 36864 + 524288


def test_alice_ai_is_float32_whatever_the_flags_with_head_sharded_attention():
    model = spec_from_config(ALICE, name="alice", source="stand-in", ssm_dtype="bfloat16")
    assert (model.family, model.variant, model.ssm_dtype, model.sizing_ssm_dtype) == ("AliceAI", "kda", "float32", "")
    assert "not read" in model.origin["ssm_dtype"]
    assert (model.mla, model.num_kv_heads, model.head_size) == (False, 2, 256)
    result = check_pairing(model, Pairing(1, 2), check_options(request_blocks=2))
    assert result.verdict in ("pass", "refused"), result.explanation()
    assert result.exact_verdict in ("pass", None) and result.simulation.ok


def test_kimi_k3_without_the_full_rank_gate_keeps_kimi_linears_layer():
    """KimiDecoderLayer picks the KDA layer by linear_attn_config.use_full_rank_gate, not by the
    architecture: a Kimi-K3 config without it runs Kimi-Linear's float32 layer, hashed GDN_ATTN."""
    config = {"architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3",
              "text_config": json.loads(HF.read_text())}
    k3 = spec_from_config(config, name="k3", source="stand-in", ssm_dtype="bfloat16")
    linear = spec_from_config(json.loads(HF.read_text()), name="kl", source="stand-in", ssm_dtype="bfloat16")
    assert (k3.family, k3.ssm_dtype, k3.sizing_ssm_dtype, k3.ssm_backend) == ("Kimi-K3", "float32", "bfloat16", "")
    assert (k3.layers, k3.params, k3.head_size) == (linear.layers, linear.params, linear.head_size)


@pytest.mark.parametrize("p_tp, d_tp, semantics", [(1, 2, "exact"), (2, 1, "vllm")])
def test_execute_moves_every_byte_over_nixl(nixl, p_tp, d_tp, semantics):
    from rank_processes import assert_no_rank_left, new_tag

    env = new_tag()
    result = run_cli("execute", "--model", "kimi-linear-48b", "--p-tp", str(p_tp), "--d-tp", str(d_tp),
                     "--device", "cpu", "--format", "json", "--timeout", "120", "--iters", "1", "--semantics",
                     semantics, "--no-enable-prefix-caching", "--layers", "8", env=env, timeout=300)
    assert result.code == 0, result.stdout[-2000:] + result.stderr[-2000:]
    doc = json.loads(result.stdout)
    assert doc["verified"] and len(doc["decode"]) == d_tp
    for d in doc["decode"]:
        assert d["verdict"]["ok"] and d["verdict"]["wrong_bytes"] == 0 and d["verdict"]["checked_bytes"] > 0
    assert_no_rank_left(env)


def test_an_mla_plan_file_is_executed(nixl, tmp_path):
    """``execute --plan`` of a Kimi-Linear plan: the file's MLA attention is taken from the config
    (not as --kv-heads), and P's split kernel blocks (_split_remote_blocks) are not split again."""
    from rank_processes import assert_no_rank_left, new_tag

    path = tmp_path / "kimi.json"
    written = run_cli("plan", "--model", "kimi-linear-48b", "--p-tp", "2", "--d-tp", "1", "--no-enable-prefix-caching",
                      "--p-num-blocks", "64", "--d-num-blocks", "64", "--output", str(path))
    assert written.code == 0, written.stderr
    geometry = json.loads(path.read_text())["engines"]["prefill"]
    assert geometry["split_by_remote"] > 1
    env = new_tag()
    result = run_cli("execute", "--plan", str(path), "--device", "cpu", "--iters", "1", "--timeout", "120",
                     "--format", "json", env=env, timeout=300)
    assert result.code == 0, result.stdout[-2000:] + result.stderr[-2000:]
    doc = json.loads(result.stdout)
    assert doc["verified"] and all(d["verdict"]["wrong_bytes"] == 0 for d in doc["decode"])
    assert_no_rank_left(env)
