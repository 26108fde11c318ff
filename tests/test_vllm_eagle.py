"""An EAGLE-3 drafter under vLLM: its attention layers join the target's KV-cache groups where
their pages are the target's (docs/reference.md, section 4, "Draft layers"), checked against
vLLM's own grouping in its environment (tests/eagle_groups.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from cli_run import run_cli
from test_speculative import RELEASES, plan

FIXTURES = Path(__file__).parent / "fixtures" / "hf-configs"
# Llama-3-70B's drafter: 8 KV heads of 128, as Nemotron-H-8B's attention; Qwen3.5-4B's: 4 of 256,
# not Qwen3.5-0.8B's 2 of 256.
LLAMA = str(FIXTURES / "sgl-project__SpecForge__llama3-70B-eagle3.json")
QWEN = str(FIXTURES / "sgl-project__SpecForge__qwen3.5-4b-eagle3.json")
# MiniCPM-V-4's drafter: 2 KV heads of 128, half Qwen3.5-0.8B's page.
MINICPM = str(FIXTURES / "sgl-project__SpecForge__minicpm-v4-eagle3.partial.json")
VLLM = {"0.33": "MAMBAXFER_TEST_VLLM_0_33", "0.34": "MAMBAXFER_TEST_VLLM_0_34"}


def eagle3(drafter: str, tokens: int | None = 3) -> str:
    return json.dumps({"method": "eagle3", "model": drafter,
                       **({} if tokens is None else {"num_speculative_tokens": tokens})})


@pytest.mark.parametrize("release", RELEASES)
def test_the_drafters_layer_joins_the_attention_group(release):
    """Nemotron-H-8B: 24 Mamba2 + 4 attention layers (groups of 4); the drafter's one layer is a
    5th attention layer, so vLLM's groups hold 5 layers: 5 SSM groups (the last of 4), 5 tensors."""
    before = plan("nemotron-h-8b", "--vllm-version", release)
    after = plan("nemotron-h-8b", "--vllm-version", release, "--speculative-config", eagle3(LLAMA))
    assert before["descriptors"]["group_tensors"] == [4] * 7
    assert after["descriptors"]["groups"] == ["ssm"] * 5 + ["attention"]
    assert after["descriptors"]["group_tensors"][-1] == 5 and after["descriptors"]["decode"]["tensors"] == 5
    assert after["model"]["draft_layers"] == 1 and after["model"]["attention_layers"] == 5
    assert after["model"]["num_spec"] == 3
    assert "draft-layers" not in [w["code"] for w in after["warnings"]]


def test_show_ids_prints_the_drafters_groups_in_80_columns():
    result = run_cli("plan", "--model", "nemotron-h-8b", "--p-tp", "1", "--d-tp", "2", "--semantics", "vllm",
                     "--show", "ids", "--speculative-config", eagle3(LLAMA), env={"COLUMNS": "80"})
    assert result.code == 0, result.stderr
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    text = " ".join(result.stdout.split())
    assert "KV-cache groups ssm*5,attention · 5 tensors" in text and "5 attention layers" in text


def test_a_drafter_of_other_pages_is_planned_in_raised_pages():
    """Qwen3.5-4B's drafter on Qwen3.5-0.8B (4 KV heads of 256, not 2): its page is twice the
    target's, so unify_kv_cache_spec_page_size doubles the target's attention block and pads the
    SSM pages; its layer is a group of its own (18 GDN, 6 attention, 1 draft group, 1 tensor)
    whose 576-token blocks are twice as many per request; the warning goes."""
    alone = plan("qwen3.5-0.8b", "--num-spec", "3")
    document = plan("qwen3.5-0.8b", "--speculative-config", eagle3(QWEN))
    assert document["model"]["draft_layers"] == 1 and document["model"]["draft_attention"] == [4, 256]
    assert document["descriptors"]["groups"] == ["ssm"] * 18 + ["attention"] * 7
    assert document["descriptors"]["decode"]["tensors"] == 1
    for side in ("prefill", "decode"):
        before, after = alone["engines"][side], document["engines"][side]
        assert after["block_size"] == 2 * before["block_size"] and after["page_bytes"] == 2 * before["page_bytes"]
    blocks = document["descriptors"]["request"]["decode_blocks"]
    assert len(blocks[-1]) == 2 * len(blocks[-2])
    assert "draft-layers" not in [w["code"] for w in document["warnings"]]


def test_inspect_raises_the_pages_up_to_the_heads():
    """inspect: at TP 1 the drafter's page doubles the target's block; at TP 4 (past the target's
    2 KV heads) the engine is the target's alone."""
    def engines(*extra: str) -> dict:
        result = run_cli("inspect", "--model", "qwen3.5-0.8b", "--tp", "1,4", "--format", "json", *extra)
        assert result.code == 0, result.stderr
        return json.loads(result.stdout)["engines"]

    alone, drafted = engines("--num-spec", "3"), engines("--speculative-config", eagle3(QWEN))
    assert drafted["1"]["block_size"] == 2 * alone["1"]["block_size"]
    assert drafted["1"]["page_bytes"] == 2 * alone["1"]["page_bytes"] and drafted["4"] == alone["4"]
    said = run_cli("inspect", "--model", "qwen3.5-0.8b", "--tp", "1", "--speculative-config", eagle3(QWEN),
                   env={"COLUMNS": "80"}).stdout
    assert "the drafter's 1 layer: 4 KV heads of 256" in said and max(map(len, said.splitlines())) <= 80


def test_a_drafter_past_the_heads_or_not_here_keeps_the_warning():
    """At D TP 4 (above Qwen3.5-0.8B's 2 KV heads) the ranks' pages are the drafter's size: NIXL's
    slices by the target's heads are not the drafter's, so it is not planned; nor a drafter whose
    config is not here."""
    reasons = {QWEN: "mambaxfer plans them where one page is a whole number of the other (else vLLM pads) and "
                     "no TP size exceeds either's KV heads",
               "org/not-cached-eagle3": "the drafter org/not-cached-eagle3 is not here"}
    for drafter, reason in reasons.items():
        document = plan("qwen3.5-0.8b", "--d-tp", "4", "--speculative-config", eagle3(drafter))
        assert "draft_layers" not in document["model"] and document["model"]["num_spec"] == 3
        warned = {w["code"]: w for w in document["warnings"]}
        assert reason in " ".join(str(v) for v in warned["draft-layers"].values())


def test_past_the_heads_vllm_refuses_or_misreads_the_drafter():
    """Past a model's KV heads (conformance on vLLM 0.33/0.34): Qwen3.5-0.8B's ranks at TP 4 hold
    pages of the drafter's size, so its layers join the target's group on D and not on P, which
    vLLM refuses; Nemotron-H-8B at D TP 8 (past the drafter's 4 KV heads) is paired, but the
    target's heads slice the drafter's pages: its KV lands wrong, which the warning says."""
    refused = plan("qwen3.5-0.8b", "--d-tp", "4", "--speculative-config", eagle3(QWEN))
    said = {w["code"]: w["message"] for w in refused["warnings"]}
    assert "Engine P puts Mamba/SSM hybrid KV layers in other cache groups than this worker" in said["vllm-refuses"]
    misread = plan("nemotron-h-8b", "--d-tp", "8", "--speculative-config", eagle3(QWEN))
    said = {w["code"]: w["message"] for w in misread["warnings"]}
    assert "slices the drafter's pages by the target's 8 KV heads" in said["draft-layers"]
    assert "vllm-refuses" not in said
    same = plan("nemotron-h-8b", "--p-tp", "8", "--d-tp", "8", "--speculative-config", eagle3(QWEN))
    assert "lands wrong" not in " ".join(w["message"] for w in same["warnings"])


@pytest.mark.parametrize("release", RELEASES)
def test_a_drafter_grouped_otherwise_is_refused_where_each_release_meets_it(release):
    """Qwen3.5-0.8B at P TP 1 / D TP 4 with Qwen3.5-4B's drafter: D groups the drafter's layer with
    the target's, P apart. 0.34's _pair_regions refuses that before it compares the block sizes;
    0.33 meets the block sizes first (conformance past the heads checks both against vLLM). No
    block size is offered as the fix: none changes the groups; preflight says the same."""
    document = plan("qwen3.5-0.8b", "--d-tp", "4", "--speculative-config", eagle3(QWEN), "--vllm-version", release)
    first = document["vllm"]["refusals"][0]["code"]
    assert first == ("draft-groups" if release == "0.34" else "block-size"), document["vllm"]
    assert document["vllm"]["suggested_block_size"] is None
    # the block sizes as vLLM's engines hold them: P's with the drafter apart (1152), not the plan's own
    blocks = [r["message"] for r in document["vllm"]["refusals"] if r["code"] == "block-size"]
    assert blocks == ["Local block size 320 is not divisible by remote block size 1152 or vice versa."], blocks
    kv = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})
    line = f"VLLM_SSM_CONV_STATE_LAYOUT=DS vllm serve Qwen/Qwen3.5-0.8B --kv-transfer-config '{kv}' " \
           f"--speculative-config '{eagle3(QWEN)}'"
    said = run_cli("preflight", "--prefill", line, "--decode", line + " -tp 4", "--vllm-version", release,
                   "--format", "json")
    answer = json.loads(said.stdout)
    assert said.code == 1 and f"({first}: " in answer["headline"], (said.code, answer["headline"])
    assert [answer["engines"][side]["geometry"]["block_size"] for side in ("prefill", "decode")] == [1152, 320]


def test_a_drafters_request_holds_the_targets_tokens_in_its_own_blocks():
    """MiniCPM-V-4's drafter (half Qwen3.5-0.8B's page, so blocks twice the target's) at P TP 4 /
    D TP 2 on FLASHINFER, P blocks of 320 tokens and D's of 576: one D block's tokens take two of
    P's target blocks and one of P's 640-token drafter blocks (vLLM pairs no more)."""
    document = plan("qwen3.5-0.8b", "--p-tp", "4", "--attention-backend", "FLASHINFER",
                    "--speculative-config", eagle3(MINICPM), "--vllm-version", "0.34")
    assert (document["engines"]["prefill"]["block_size"], document["engines"]["decode"]["block_size"]) == (320, 576)
    request = document["descriptors"]["request"]
    assert [len(b) for b in request["prefill_blocks"][-2:]] == [2, 1]
    assert [len(b) for b in request["decode_blocks"][-2:]] == [1, 1]


def test_one_tp_size_past_the_heads_plans_the_drafter():
    """P and D at one TP size past the KV heads, or both holding one head of each a rank, read
    whole pages of one P rank: Qwen3.5-0.8B at 4
    (one head of 256 a rank, the drafter's too) puts the drafter's layer in its attention groups;
    Nemotron-H-8B at 8 (128 against the drafter's 256 a rank) doubles its attention block and
    the drafter's group holds two blocks a request; no warning, and the IDs fit 80 columns."""
    joined = plan("qwen3.5-0.8b", "--p-tp", "4", "--d-tp", "4", "--speculative-config", eagle3(QWEN))
    assert joined["model"]["draft_layers"] == 1 and "draft_attention" not in joined["model"]
    assert joined["descriptors"]["groups"] == ["ssm"] * 3 + ["attention"] and joined["warnings"] == []
    alone = plan("nemotron-h-8b", "--p-tp", "8", "--d-tp", "8", "--num-spec", "3")
    raised = plan("nemotron-h-8b", "--p-tp", "8", "--d-tp", "8", "--speculative-config", eagle3(QWEN))
    assert raised["model"]["draft_attention"] == [4, 256] and raised["warnings"] == []
    assert raised["engines"]["decode"]["block_size"] == 2 * alone["engines"]["decode"]["block_size"]
    blocks = raised["descriptors"]["request"]["decode_blocks"]
    assert len(blocks[-1]) == 2 * len(blocks[-2])
    result = run_cli("plan", "--model", "nemotron-h-8b", "--p-tp", "8", "--d-tp", "8", "--semantics", "vllm",
                     "--show", "ids", "--speculative-config", eagle3(QWEN), env={"COLUMNS": "80"})
    assert result.code == 0 and max(len(line) for line in result.stdout.splitlines()) <= 80, result.stdout
    # P TP 4 and D TP 8 (or back) hold one head of each a rank: D reads one P rank's whole pages
    for p_tp, d_tp in (("4", "8"), ("8", "4")):
        both = plan("qwen3.5-0.8b", "--p-tp", p_tp, "--d-tp", d_tp, "--block-size", "80",
                    "--speculative-config", eagle3(QWEN))
        assert both["model"]["draft_layers"] == 1 and both["warnings"] == [], both["warnings"]


def test_a_drafter_of_smaller_pages_is_planned_in_raised_blocks():
    """MiniCPM-V-4's drafter on Qwen3.5-0.8B (2 KV heads of 128 against 2 of 256): its page is half
    the target's, so unify_kv_cache_spec_page_size doubles its block and leaves the target's; a
    request of 4 target blocks holds 2 of the drafter's, each a target-sized page."""
    alone = plan("qwen3.5-0.8b", "--num-spec", "3", "--request-blocks", "4")
    document = plan("qwen3.5-0.8b", "--speculative-config", eagle3(MINICPM), "--request-blocks", "4")
    assert document["model"]["draft_layers"] == 1 and document["model"]["draft_attention"] == [2, 128]
    assert document["descriptors"]["groups"] == ["ssm"] * 18 + ["attention"] * 7
    assert document["engines"]["decode"] == alone["engines"]["decode"] and document["warnings"] == []
    blocks = document["descriptors"]["request"]["decode_blocks"]
    assert [len(b) for b in blocks[-2:]] == [4, 2]


def test_check_checks_the_drafters_layers():
    """check moves the drafter's bytes too (no warning) where it plans them, not past the heads
    (up to TP 4, vLLM refuses P TP 4 with other block sizes: exit 1)."""
    said = "warning: draft-layers: the draft's layers are not in the"
    for model, drafter, tp, warned in (("qwen3.5-0.8b", QWEN, "2", False), ("nemotron-h-8b", LLAMA, "1", False),
                                       ("qwen3.5-0.8b", QWEN, "4", True)):
        result = run_cli("check", "--model", model, "--max-tp", tp, "--speculative-config", eagle3(drafter),
                         env={"COLUMNS": "80"})
        assert result.code == int(warned), result.stderr
        assert (said in " ".join(result.stdout.split())) == warned, result.stdout


def test_execute_moves_and_verifies_a_drafter_of_other_pages(tmp_path):
    """1 → 2: each D rank posts one descriptor per block of the drafter's group (twice the
    target's blocks) beside the target's, and every byte is verified; also from a plan file."""
    common = ("execute", "--device", "cpu", "--format", "json", "--timeout", "90", "--model", "qwen3.5-0.8b",
              "--p-tp", "1", "--d-tp", "2", "--iters", "1")
    result = run_cli(*common, "--speculative-config", eagle3(QWEN), env={"COLUMNS": "80"})
    assert result.code == 0, result.stderr
    drafted = json.loads(result.stdout)
    blocks = drafted["request"]["decode_blocks"]
    assert drafted["verified"] and len(blocks) == 25 and len(blocks[-1]) == 2 * len(blocks[-2])
    per_rank = 18 * 4 * len(blocks[0]) + sum(len(b) for b in blocks[18:])   # k = 4 SSM regions, 1 tensor
    assert [rank["descriptors_posted"] for rank in drafted["decode"]] == [per_rank] * 2
    said = run_cli(*common[:3], *common[5:], "--speculative-config", eagle3(QWEN), env={"COLUMNS": "80"})
    assert said.code == 0 and "draft-layers" not in said.stdout, said.stdout
    assert "request: 2 or 4 logical blocks in each of 25 KV-cache groups" in " ".join(said.stdout.split())
    path = tmp_path / "plan.json"
    assert run_cli("plan", "--model", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "2", "--speculative-config",
                   eagle3(QWEN), "--p-num-blocks", "64", "--d-num-blocks", "64", "--output", str(path)).code == 0
    again = run_cli("execute", "--plan", str(path), "--device", "cpu", "--timeout", "90", "--iters", "1",
                    "--format", "json")
    assert again.code == 0 and json.loads(again.stdout)["verified"], again.stderr


def test_bench_moves_a_drafter_of_other_pages():
    result = run_cli("bench", "--device", "cpu", "--timeout", "90", "--model", "qwen3.5-0.8b", "--p-tp", "1",
                     "--d-tp", "1", "--iters", "1", "--layers", "2", "--format", "json",
                     "--speculative-config", eagle3(QWEN), env={"COLUMNS": "80"})
    assert result.code == 0 and json.loads(result.stdout)["verified"], result.stderr
    assert "draft-layers" not in result.stderr


def test_a_drafter_without_a_token_count_is_refused_in_vllms_words():
    result = run_cli("plan", "--model", "nemotron-h-8b", "--p-tp", "1", "--d-tp", "1",
                     "--speculative-config", eagle3(LLAMA, None))
    assert result.code == 1, result.stderr
    assert "A speculative model was provided, but `num_speculative_tokens` was not provided" in result.stderr


def test_execute_moves_and_verifies_the_drafters_pages():
    common = ("execute", "--device", "cpu", "--format", "json", "--timeout", "90", "--model", "nemotron-h-8b",
              "--p-tp", "1", "--d-tp", "2", "--iters", "1")
    alone = json.loads(run_cli(*common, "--num-spec", "3").stdout)
    result = run_cli(*common, "--speculative-config", eagle3(LLAMA))
    assert result.code == 0, result.stderr
    drafted = json.loads(result.stdout)
    assert drafted["verified"]
    for target, with_draft in zip(alone["decode"], drafted["decode"]):
        assert with_draft["descriptors_posted"] == target["descriptors_posted"] + len(
            drafted["request"]["decode_blocks"][-2])       # one more page per block of the attention group
        assert with_draft["verdict"]["checked_bytes"] > target["verdict"]["checked_bytes"]


def test_the_probe_names_an_eagle_drafters_layers_as_vllms_model():
    """vLLM's EAGLE models number the drafter's layers after the target's decoder layers
    (Eagle3LlamaForCausalLM: start_layer_id; Nemotron-H-8B has 52), not under an MTP module."""
    from mambaxfer_cli.engines.vllm.drafts import with_drafts
    from mambaxfer_cli.engines.vllm.probe import Installed
    from mambaxfer_cli.engines.vllm.releases import release
    from mambaxfer_cli.readers.model_source import load_model

    model = with_drafts(load_model("nemotron-h-8b"), json.loads(eagle3(LLAMA)), release("0.34"))
    probe = object.__new__(Installed)
    probe.drafter = ("eagle3", {})
    names = probe.layer_names(model)
    assert names[-1] == "model.layers.52.self_attn.attn" and names[-2] == "model.layers.27.mixer"
    probe.drafter = None
    assert probe.layer_names(model)[-1] == "mtp.layers.0.self_attn.attn"


def in_vllm(release: str, *args: object) -> list[dict]:
    """tests/eagle_groups.py's JSON lines: the groups (or the classes)."""
    python = os.environ.get(VLLM[release], "")
    if not (python and Path(python).is_file()):
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {VLLM[release]} names no vLLM {release}", pytrace=False)
        pytest.skip(f"{VLLM[release]} does not name a Python with vLLM {release}")
    environ = {k: v for k, v in os.environ.items() if k != "VLLM_SSM_CONV_STATE_LAYOUT"}
    proc = subprocess.run([python, str(Path(__file__).with_name("eagle_groups.py")), *map(str, args)],
                          capture_output=True, text=True, timeout=900, env=environ)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


GROUPED = (("nemotron-h-8b", LLAMA, 1), ("nemotron-h-8b", LLAMA, 2), ("qwen3.5-0.8b", QWEN, 1),
           ("qwen3.5-0.8b", QWEN, 2), ("nemotron-h-8b", QWEN, 2), ("qwen3.5-0.8b", QWEN, 4),
           ("nemotron-h-8b", QWEN, 8), ("qwen3.5-0.8b", MINICPM, 2))
_answers: dict = {}


def vllm_answers(release: str) -> list[dict]:
    """eagle_groups.py's lines for GROUPED, then for the classes of every preset's architecture and
    NO_EAGLE3's: one vLLM process per release."""
    from mambaxfer_cli.engines.vllm.drafts import no_eagle3
    from mambaxfer_cli.engines.vllm.startup import family_table
    from mambaxfer_cli.readers.model_source import load_model, preset_names

    if release not in _answers:
        refused = set(family_table("CONNECTOR_REFUSED"))
        archs = {load_model(name).hf_config["architectures"][0] for name in preset_names()} - refused
        _answers[release] = in_vllm(release, *(word for case in GROUPED for word in case), "classes",
                                    *sorted(archs | no_eagle3()))
    return _answers[release]


@pytest.mark.parametrize("release", RELEASES)
def test_vllm_groups_the_drafters_layers_as_mambaxfer(release):
    """vLLM's own grouping (EAGLEConfig's reading of the drafter, is_draft specs) is mambaxfer's at
    TP 1 and 2 (conformance --speculative-config compares every function: test_conformance.py).
    Where the drafter's pages differ (a larger page; or Qwen3.5-4B's drafter on Nemotron-H-8B,
    4 KV heads of 256 against 8 of 128, the same page size), its layers are a bucket of their own
    and every group's block and page are unify_kv_cache_spec_page_size's; appending them to the
    target's attention (a planted fault) is not vLLM's grouping."""
    found = vllm_answers(release)[:-1]
    assert len(found) == len(GROUPED), found
    for groups in found[:2]:
        assert groups["draft_layers"] == 1 and groups["ours"] == groups["vllm"] and not groups["apart"], groups
    for apart, count in zip(found[2:5], (25, 25, 29)):
        assert len(apart["vllm"]) == count and apart["apart"] == apart["vllm"] == apart["ours"], apart
        assert apart["our_pages"] == apart["vllm_pages"] and apart["draft_layers"] == 1, apart
        assert apart["appended"] != apart["vllm"]
    # Past the KV heads (replicated, one per rank): at TP 4 the drafter's page is Qwen3.5-0.8B's and
    # its layer joins the attention group; at TP 8 it is twice Nemotron-H-8B's and raises its block.
    joined, raised, smaller = found[5:]
    assert joined["ours"] == joined["vllm"] == joined["appended"] != joined["apart"], joined
    assert raised["ours"] == raised["vllm"] == raised["apart"] and raised["our_pages"] == raised["vllm_pages"]
    assert raised["vllm_pages"][-2][0] == 2 * raised["vllm_pages"][-1][0] and raised["draft_layers"] == 1, raised
    # A drafter page half the target's: its own block is doubled instead, the target's kept.
    assert smaller["ours"] == smaller["vllm"] == smaller["apart"] and smaller["our_pages"] == smaller["vllm_pages"]
    assert smaller["vllm_pages"][-1][0] == 2 * smaller["vllm_pages"][-2][0], smaller


def test_preflight_checks_the_drafters_bytes():
    """Two `vllm serve` lines with the drafter: the byte check moves its layer's attention pages
    too (more bytes than a drafter whose config is not here), and no line warns: Nemotron-H-8B
    with Llama-3-70B's drafter (its pages), Qwen3.5-0.8B with Qwen3.5-4B's (raised pages)."""
    from test_preflight import lines, run_json

    def moved(model: str, drafter: str) -> tuple[int, dict]:
        flag = f"--speculative-config '{eagle3(drafter)}'"
        code, doc = run_json(*lines(model, flag, f"--tensor-parallel-size 2 {flag}"))
        assert code == 0 and doc["verdict"] == "works" and doc["byte_check"]["wrong_bytes"] == 0, doc
        return doc["byte_check"]["bytes_moved"], doc

    for model, drafter in (("nvidia/Nemotron-H-8B-Base-8K", LLAMA), ("Qwen/Qwen3.5-0.8B", QWEN)):
        drafted, doc = moved(model, drafter)
        assert not doc["plan_warnings"] and not [w for w in doc["warnings"] if "is_draft layers" in w]
        alone, doc = moved(model, "org/not-cached-eagle3")
        assert drafted > alone
        assert [w for w in doc["warnings"] if "the drafter org/not-cached-eagle3 is not here" in w], doc["warnings"]


def test_eagle3_on_a_class_without_the_interface_is_refused_in_vllms_words():
    """Jamba's vLLM class lacks SupportsEagle3: EAGLE-3 stops the worker; EAGLE (no aux hidden
    states) does not ask for it."""
    result = run_cli("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "1",
                     "--speculative-config", eagle3("org/jamba-eagle3"))
    assert result.code == 1 and '"Model does not support EAGLE3 interface"' in result.stderr, result.stderr
    eagle = json.dumps({"method": "eagle", "model": "org/jamba-eagle", "num_speculative_tokens": 1})
    assert run_cli("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--speculative-config", eagle).code == 0


@pytest.mark.parametrize("release", RELEASES)
def test_the_classes_without_eagle3_are_vllms(release):
    """NO_EAGLE3 is every preset's architecture whose vLLM class lacks SupportsEagle3, and only those
    (the connector's refused ones, LFM2, never get that far)."""
    from mambaxfer_cli.engines.vllm.drafts import no_eagle3

    NO_EAGLE3 = no_eagle3()
    found = vllm_answers(release)[-1]
    assert {arch for arch, supported in found.items() if supported is False} == NO_EAGLE3, found


def test_check_reads_the_drafters_config_once(cli, monkeypatch, tmp_path):
    """Every pairing's plan and warning take the drafter's config from one read of its file."""
    from mambaxfer_cli.engines.vllm import drafts

    drafter = tmp_path / "config.json"
    drafter.write_text(Path(QWEN).read_text())
    reads: list[object] = []
    monkeypatch.setattr(drafts, "read_json", lambda path: reads.append(path) or json.loads(Path(path).read_text()))
    code, _, err = cli("check", "--model", "qwen3.5-0.8b", "--max-tp", "4", "--speculative-config",
                       eagle3(str(drafter)))
    assert code in (0, 1) and "Traceback" not in err, err
    assert len(reads) == 1, reads
