"""``mambaxfer conformance``: vLLM's own code against mambaxfer's rules.

The project's test environment has no vLLM: the tests that need one run vLLM's interpreter (given
in MAMBAXFER_TEST_VLLM_0_33 and MAMBAXFER_TEST_VLLM_0_34, which ``.ci/run`` creates) in a
subprocess. In CI (CI=true) a missing interpreter fails those tests; elsewhere they skip.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from cli_run import CliResult, assert_user_error, messages, run_cli
from mambaxfer_cli.engines.vllm.conformance.adapter import KNOWN_RELEASES, Ours, release_for
from mambaxfer_cli.engines.vllm.conformance.cases import (
    D_NUM_BLOCKS, FLAG_VARIANTS, HASH_VARIATIONS, P_NUM_BLOCKS, Case, Difference, Flags, CaseTally, pairings,
)
from mambaxfer_cli.engines.vllm.conformance.report import Function, FunctionResult, Report
from mambaxfer_cli.readers.model_source import load_model
from mambaxfer_cli.schema import document_schema

DRIVER = Path(__file__).with_name("conformance_driver.py")
RELEASES = {"0.33": "MAMBAXFER_TEST_VLLM_0_33", "0.34": "MAMBAXFER_TEST_VLLM_0_34"}
TIMEOUT = 1800      # a generous bound for a stuck interpreter, never a speed requirement

# --- the vLLM interpreters -------------------------------------------------------------------------

def vllm_python(release: str) -> str:
    path = os.environ.get(RELEASES[release], "")
    if path and Path(path).is_file():
        return path
    message = f"{RELEASES[release]} does not name a Python with vLLM {release} installed (got {path!r})"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {message}: .ci/run creates it", pytrace=False)
    pytest.skip(message)


def run_in_vllm(release: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("VLLM_SSM_CONV_STATE_LAYOUT", "VLLM_LOGGING_LEVEL")}
    return subprocess.run([vllm_python(release), *args], capture_output=True, text=True, timeout=TIMEOUT,
                          env={**environ, "COLUMNS": "80", **(env or {})})


_batches: dict = {}


@pytest.fixture
def ran(tmp_path_factory):
    """``ran(release)``: each conformance run of this file (``installed_runs``, then RUNS) in vLLM
    ``release``'s environment, by name: one process per release imports vLLM once for them all."""
    def get(release: str) -> dict:
        if release not in _batches:
            tmp = tmp_path_factory.mktemp(f"conformance-{release}")
            proc = run_in_vllm(release, str(DRIVER), json.dumps([*installed_runs(release, tmp), *RUNS]))
            assert proc.returncode == 0, proc.stderr[-3000:]
            _batches[release] = json.loads(proc.stdout.strip().splitlines()[-1])
            _batches[release]["junit"] = (tmp / "junit.xml").read_text()
        return _batches[release]
    return get


@pytest.fixture(params=sorted(RELEASES))
def all_presets(request, ran) -> tuple[str, dict, str]:
    """``conformance --all-presets --format json --junit`` in vLLM ``release``'s environment."""
    runs = ran(request.param)
    assert runs["all-presets"]["code"] in (0, 1), runs["all-presets"]["stderr"][-3000:]
    return request.param, runs["all-presets"]["document"], runs["junit"]


def agreed(run: dict) -> dict:
    """The document of a run that exited 0."""
    assert run["code"] == 0, str(run["document"])[-3000:] + run["stderr"][-3000:]
    return run["document"]


def by_function(document: dict) -> dict:
    return {f["function"]: f for f in document["functions"]}


# --- against the real vLLM -------------------------------------------------------------------------

def test_the_installed_release_and_its_rules(all_presets):
    release, document, _ = all_presets
    assert document["vllm"]["version"].startswith(release + ".")
    assert document["vllm"]["rules"] == release_for(document["vllm"]["version"])
    assert document["models"] == sorted(document["models"]) and len(document["models"]) >= 7


STATE_FUNCTIONS = ("derive_mamba_conv_split", "remote_conv_offsets", "_build_mamba_remote", "_build_mamba_local",
                   "bytes right (exact plan)", "compute_tp_mapping")
START_FUNCTIONS = ("verify_with_parallel_config", "ModelRegistry")     # read the config alone: every model


def test_every_function_compares_real_cases(all_presets):
    """No vacuous agreement: each function ran on every model it applies to."""
    _, document, _ = all_presets
    for function in document["functions"]:
        assert function["outcome"] != "could not be called", function
        assert function["cases"] > 0, function["function"]
        if function["function"] == "get_kv_cache_spec (QSA caches)":     # the models with QSA alone
            assert set(function["by_model"]) == {"qwen3.8-flash-next", "qwen3.8-flash-next + MTP"}, function
        elif function["function"] != "GDN checkpoint alignment":
            # MLA models (Kimi-Linear) too: on the MLA backends, a note says which
            assert set(function["by_model"]) == set(document["models"]), function["function"]
    assert any(n.startswith("kimi-linear-48b: its MLA engines run TRITON_MLA") for n in document["notes"])
    functions = by_function(document)
    for name in ("update_block_size_for_backend", "handshake verdict", "_compute_desc_ids",
                 "compute_nixl_compatibility_hash"):
        assert functions[name]["by_model"]["kimi-linear-48b"]["cases"] > 0, name
    # --use-replayssm: every combination of the settings vLLM's check reads where the class supports
    # it (Nemotron-H's ReplaySSM, Kimi-Linear's RecoverSSM), one default engine elsewhere.
    replay = functions["validate_mamba_cached_kernel"]["by_model"]
    assert replay["nemotron-h-8b"]["cases"] >= 288 and replay["kimi-linear-48b"]["cases"] >= 288, replay
    assert replay["jamba"]["cases"] == 1, replay


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_glm_5_next_agrees_with_vllm_on_its_sparse_backend(release, ran):
    """GLM-5-Next on vLLM's sparse MLA pick for the GPU: every function the probe stands it in for
    agrees (blocks aligned to the indexer's kernel, kernel blocks never split, BLHNC from the
    indexer backends' layouts), the handshake on the regions vLLM's own register_kv_caches makes of
    its KV caches (the hybrid MLA block-length assert naming every region), and the descriptor IDs
    vLLM's worker numbers over those regions (compressed keys, latents and tail rings each a region
    of its own, the rings a transfer group of their own)."""
    document = agreed(ran(release)["glm-5-next"])
    functions = by_function(document)
    assert document["ok"] and all(f["outcome"] in ("agrees", "no case") for f in document["functions"])
    for name in ("update_block_size_for_backend", "select_common_block_size", "resolve_kv_cache_layout",
                 "compute_nixl_compatibility_hash", "get_mamba_state_*_from_config", "handshake verdict",
                 "_compute_desc_ids", *STATE_FUNCTIONS):
        assert functions[name]["by_model"]["glm-5-next"]["cases"] > 0, name
    assert any(n.startswith("glm-5-next: its MLA layers run FLASHINFER_MLA_SPARSE_SM90") for n in document["notes"])


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_kimi_k3_agrees_with_vllm_and_k3_1_is_refused_as_the_release_refuses_it(release, ran):
    """Kimi-K3's example config (tests/test_kimi_k3.py) through vLLM's own functions: its class's
    state with and without --mamba-ssm-cache-dtype bfloat16 (KimiK3DeltaAttention reads it), blocks,
    reads, IDs and hashes on the full-rank-gate layer. Kimi-K3.1 is refused in each release's words:
    0.33's registry has no such architecture, 0.34's connector cannot register its KV cache."""
    document = agreed(ran(release)["kimi-k3"])
    functions = by_function(document)
    assert document["ok"] and all(f["outcome"] == "agrees" for f in document["functions"])
    assert functions["get_mamba_state_*_from_config"]["cases"] == 8      # TP 1-4, auto and bfloat16
    for name in ("update_block_size_for_backend", "compute_nixl_compatibility_hash", "handshake verdict",
                 "_compute_desc_ids", "ModelRegistry", *STATE_FUNCTIONS):
        assert functions[name]["cases"] > 0, name
    refused = ran(release)["kimi-k3.1"]
    words = ("vLLM 0.33 does not serve KimiK31ForConditionalGeneration" if release == "0.33" else
             "AssertionError: KV cache view cannot be partitioned into NIXL regions")
    assert refused["code"] == 2 and words in " ".join(refused["stderr"].split()), refused["stderr"][-2000:]


@pytest.mark.parametrize("layout", ["SD", "ds"])
@pytest.mark.parametrize("release", sorted(RELEASES))
def test_a_conv_layout_but_ds_is_one_line_exit_2(release, layout, ran):
    """vLLM's NIXL worker asserts DS for any model with Mamba state (and vLLM reads only SD or DS):
    under another layout nothing can be compared."""
    run = ran(release)[f"layout {layout}"]
    result = CliResult(run["code"], run["document"]["unparsed"], run["stderr"])
    assert_user_error(result, f"VLLM_SSM_CONV_STATE_LAYOUT={layout}:", "requires DS conv state layout",
                      "unset it or set it to DS")
    assert len(messages(result.stderr.strip())) == 1 and not result.stdout


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_bailing_v3_state_agrees_with_vllm(release, ran):
    """Bailing-V3's example config (head_dim 128, qk_rope_head_dim 64) through vLLM's own
    ``BailingMoeV3ForCausalLM.get_mamba_state_shape_from_config`` on transformers'
    ``BailingHybridConfig``, which sets ``head_dim`` from ``qk_rope_head_dim``: its state, and the
    blocks, reads and IDs built on it, agree at every pairing up to TP 2."""
    document = agreed(ran(release)["bailing-v3"])
    assert document["ok"] and all(f["outcome"] == "agrees" for f in document["functions"])
    assert by_function(document)["get_mamba_state_*_from_config"]["cases"] > 0


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_nemotron_h_mtp_agrees_with_vllm(release, ran):
    """Nemotron-3-Super with its MTP layer ("*E": one attention layer, tagged is_draft): vLLM's own
    grouping and _compute_desc_ids agree on the drafted cases too (its few logical blocks per
    group once left no room for the request's spread-out block IDs)."""
    document = agreed(ran(release)["nemotron-h-mtp"])
    assert document["ok"] and all(f["outcome"] == "agrees" for f in document["functions"])
    assert any(name.endswith(" + MTP") for name in document["models"])
    assert by_function(document)["_compute_desc_ids"]["cases"] > 0


def _mtp_count_runs(runs: dict, name: str) -> dict:
    """``name``'s config as installed and with its fault planted: the installed run agrees on every
    function with its MTP model; the planted one differs on some of _compute_desc_ids' cases,
    whose first difference is returned."""
    installed, planted = runs[f"{name} as-installed"], runs[f"{name} planted"]
    assert installed["code"] == 0 and all(f["outcome"] == "agrees" for f in installed["document"]["functions"])
    assert any(name.endswith(" + MTP") for name in installed["document"]["models"])
    ids = by_function(planted["document"])["_compute_desc_ids"]
    assert planted["code"] == 1 and ids["outcome"] == "differs" and 0 < ids["differing"] < ids["cases"], ids
    return ids["first_difference"]


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_nemotron_h_mtp_layers_block_type_agrees_with_vllm_and_the_pattern_key_alone_differs(release, ran):
    """Nemotron-3-Super with mtp_layers_block_type (the key Nemotron-3-Ultra's config gives) of two
    attention layers beside its "*E": the probe builds the MTP layers vLLM's predictor reads of its
    loaded NemotronHConfig, so both agree on 2; mambaxfer reading the pattern key alone (1) differs."""
    first = _mtp_count_runs(ran(release), "mtp-pattern-key")
    assert _plan(first["command"])["model"]["draft_layers"] == 2


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_qwen4exp_mtp_layers_agree_with_vllm_and_another_count_key_differs(release, ran):
    """Qwen3.8-Flash-Next with mtp_num_hidden_layers 2: the probe builds the QSA layers vLLM's
    predictor reads of its loaded config, so both agree on 2; mambaxfer counting them by
    num_nextn_predict_layers (absent: 1) differs on the drafted cases."""
    assert "2 MTP layers" in json.dumps(_mtp_count_runs(ran(release), "qwen4exp-mtp-key"))


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_glm_5_next_mtp_layers_agree_with_vllm_and_another_count_key_differs(release, ran):
    """GLM-5-Next's preset config with num_nextn_predict_layers 2: the probe builds the MLA layers
    (with the indexer's caches) vLLM's predictor reads of its loaded config, so both agree on 2;
    mambaxfer counting them by mtp_num_hidden_layers (absent: 1) differs on the drafted cases."""
    assert "2 MTP layers" in json.dumps(_mtp_count_runs(ran(release), "glm-mtp-key"))


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_kimi_k3_mtp_layer_agrees_with_vllm(release, ran):
    """Kimi-K3's example config with one MTP layer (an MLA layer, tagged is_draft): vLLM's own
    grouping, _compute_desc_ids and its class's state, whose conv rows follow the speculative tokens
    under --mamba-ssm-cache-dtype bfloat16 too, agree on the drafted cases."""
    document = agreed(ran(release)["kimi-k3-mtp"])
    assert document["ok"] and any(name.endswith(" + MTP") for name in document["models"])


def test_every_function_agrees(all_presets):
    release, document, _ = all_presets
    differing = sorted(f["function"] for f in document["functions"] if f["outcome"] != "agrees")
    assert document["ok"] and differing == [], (release, differing)


def test_the_facts_vllm_decides_are_compared_not_skipped(all_presets):
    """The two findings that became rules are compared on real cases: models without attention go
    through the handshake comparison on every pairing (vLLM refuses them with StopIteration), and
    Qwen3-Next's P_TP > D_TP pairings with a block-size ratio go through _compute_desc_ids."""
    _, document, _ = all_presets
    functions = by_function(document)
    handshake = functions["handshake verdict"]["by_model"]
    for model in ("mamba-130m", "mamba-codestral-7b"):
        assert handshake[model]["cases"] > 0 and handshake[model]["differing"] == 0, model
    ids = functions["_compute_desc_ids"]["by_model"]
    assert ids["qwen3-next-80b"]["cases"] > 0 and ids["qwen3.5-0.8b"]["cases"] > 0


def test_document_validates_against_the_published_schema(all_presets):
    _, document, _ = all_presets
    jsonschema.Draft202012Validator(document_schema("conformance")).validate(document)


def test_junit_has_one_case_per_function_and_fails_the_differing_ones(all_presets):
    _, document, junit = all_presets
    root = ET.fromstring(junit)
    cases = root.findall(".//testcase")
    assert [c.get("name") for c in cases] == [f["function"] for f in document["functions"]]
    failed = {c.get("name") for c in cases if c.find("failure") is not None}
    assert failed == {f["function"] for f in document["functions"]
                      if f["outcome"] in ("differs", "could not be called")}


ROOT = Path(__file__).resolve().parents[1]
DOCUMENTED = (ROOT / "docs" / "conformance.md",)


def _as_documented(text: str) -> list[str]:
    """Output as documented: no trailing spaces, the run's duration left out."""
    return [re.sub(r" in \d+\.\d s:", " in N s:", line.rstrip()) for line in text.strip().splitlines()]


def test_the_documented_output_is_what_vllm_0_34_prints(ran):
    stdout = agreed(ran("0.34")["documented"])["unparsed"]
    assert max(len(line) for line in stdout.splitlines()) <= 80
    for page in DOCUMENTED:
        documented = page.read_text().split("<!-- conformance-output -->\n```text\n", 1)[1].split("\n```", 1)[0]
        assert _as_documented(stdout) == _as_documented(documented), page.name


# --- it can fail: vLLM altered in the driver's process ---------------------------------------------

JAMBA = ["--model", "jamba", "--max-tp", "2", "--format", "json"]
# Bamba-9B: 29 Mamba2 layers and 3 attention layers make groups of 3 layers, the last SSM group of 2.
BAMBA = str(Path(__file__).with_name("fixtures") / "hf-configs" / "bamba-9b-dims.partial.json")
SUPER = str(Path(BAMBA).with_name("nvidia__NVIDIA-Nemotron-3-Super-120B-A12B-BF16.partial.json"))
# Llama-3-70B's EAGLE-3 drafter: 8 KV heads of 128, as Nemotron-H-8B's attention (tests/test_vllm_eagle.py).
EAGLE3 = json.dumps({"method": "eagle3", "num_speculative_tokens": 3,
                     "model": str(Path(BAMBA).with_name("sgl-project__SpecForge__llama3-70B-eagle3.json"))})
DRAFTED_8B = ["--model", "nemotron-h-8b", "--speculative-config", EAGLE3, "--max-tp", "2", "--format", "json"]
# Qwen3.5-4B's EAGLE-3 drafter (4 KV heads of 256) on Qwen3.5-0.8B (2 of 256): pages not the target's.
OTHER_PAGES = json.loads(EAGLE3) | {
    "model": str(Path(BAMBA).with_name("sgl-project__SpecForge__qwen3.5-4b-eagle3.json"))}
APART_0_8B = ["--model", "qwen3.5-0.8b", "--speculative-config", json.dumps(OTHER_PAGES), "--max-tp", "2",
              "--format", "json"]
# MiniCPM-V-4's EAGLE-3 drafter (2 KV heads of 128): half Qwen3.5-0.8B's page, its block raised instead.
SMALLER_0_8B = APART_0_8B[:3] + [json.dumps(OTHER_PAGES | {"model": str(Path(BAMBA).with_name(
    "sgl-project__SpecForge__minicpm-v4-eagle3.partial.json"))})] + APART_0_8B[4:]
# Past either model's KV heads (--max-tp 8): pages that agree at one TP size only, drafter heads
# sliced by the target's, a drafter's smaller kernel blocks paired from the last token.
PAST_HEADS = {"other-pages": APART_0_8B, "smaller-pages": SMALLER_0_8B,
              "nemotron": DRAFTED_8B[:3] + [json.dumps(OTHER_PAGES)] + DRAFTED_8B[4:]}
RUNS = [{"name": "draft-apart-eagle3", "alter": "draft-apart", "args": DRAFTED_8B},
        {"name": "pad-pages", "alter": "pad-pages", "args": APART_0_8B},
        {"name": "eagle-heads", "alter": "eagle-heads", "args": DRAFTED_8B},
        {"name": "draft-apart", "alter": "draft-apart",
         "args": ["--model", "qwen3.5-0.8b", "--max-tp", "1", "--format", "json"]},
        {"name": "draft-apart-nemotron", "alter": "draft-apart",
         "args": ["--model", SUPER, "--max-tp", "2", "--format", "json"]},
        {"name": "draft-apart-qwen4exp", "alter": "draft-apart",
         "args": ["--model", "qwen3.8-flash-next", "--max-tp", "2", "--format", "json"]},
        {"name": "remote_conv_offsets", "alter": "remote_conv_offsets", "args": JAMBA},
        {"name": "_compute_desc_ids", "alter": "_compute_desc_ids", "args": JAMBA},
        {"name": "drop", "alter": "drop:_ple_group_index", "args": JAMBA},
        {"name": "heads", "alter": "heads", "args": ["--model", "jamba", "--max-tp", "4", "--format", "json"]},
        {"name": "registry", "alter": "registry", "args": JAMBA},
        {"name": "nemotron-hook", "alter": "nemotron-hook",
         "args": ["--model", "nemotron-h-8b", "--max-tp", "2", "--format", "json"]},
        {"name": "bamba", "alter": "as-installed", "args": ["--model", BAMBA, "--max-tp", "1", "--format", "json"]},
        {"name": "qsa-ring", "alter": "qsa-ring",
         "args": ["--model", "qwen3.8-flash-next", "--max-tp", "2", "--format", "json"]},
        {"name": "qsa-layouts", "alter": "qsa-layouts",
         "args": ["--model", "qwen3.8-flash-next", "--max-tp", "4", "--format", "json"]},
        {"name": "qsa-numbering", "alter": "qsa-numbering",
         "args": ["--model", "qwen3.8-flash-next", "--max-tp", "1", "--format", "json"]}]


def installed_runs(release: str, tmp: Path) -> list[dict]:
    """The runs of vLLM as installed (and the MTP-count faults planted in mambaxfer) the tests above
    read, configs written under ``tmp``."""
    fixtures = Path(BAMBA).parent
    kimi_mtp = json.loads((fixtures / "kimi-k3.example.json").read_text())
    kimi_mtp["text_config"]["num_nextn_predict_layers"] = 1
    qwen4exp = dict(load_model("qwen3.8-flash-next").hf_config)
    qwen4exp["text_config"] = {**qwen4exp["text_config"], "mtp_num_hidden_layers": 2}
    glm = dict(load_model("glm-5-next").hf_config)
    glm["text_config"] = {**glm["text_config"], "num_nextn_predict_layers": 2}
    configs = {"kimi-k3-mtp": kimi_mtp, "qwen4exp-mtp-key": qwen4exp, "glm-mtp-key": glm,
               "mtp-pattern-key": json.loads(Path(SUPER).read_text())
               | {"mtp_layers_block_type": ["attention", "attention", "moe"]}}
    for name, config in configs.items():
        (tmp / name).mkdir()
        (tmp / name / "config.json").write_text(json.dumps(config))

    def json_tp(model, tp: str) -> list[str]:
        return ["--model", str(model), "--max-tp", tp, "--format", "json"]

    runs = {"all-presets": ["--all-presets", "--format", "json", "--junit", str(tmp / "junit.xml")],
            "glm-5-next": json_tp("glm-5-next", "4"), "kimi-k3": json_tp(fixtures / "kimi-k3.example.json", "4"),
            "kimi-k3.1": ["--model", str(fixtures / "kimi-k3.1.example.json"), "--max-tp", "2"],
            "bailing-v3": json_tp(fixtures / "bailing-v3.example.json", "2"), "nemotron-h-mtp": json_tp(SUPER, "2"),
            "kimi-k3-mtp": json_tp(tmp / "kimi-k3-mtp" / "config.json", "2"),
            "eagle3": ["--model", "nemotron-h-8b", "--speculative-config", EAGLE3, "--max-tp", "2", "--format", "json"],
            "eagle3-other-pages": APART_0_8B, "eagle3-smaller-pages": SMALLER_0_8B,
            **{f"past-heads {name}": [*args[:-3], "8", *args[-2:]] for name, args in PAST_HEADS.items()},
            "qwen4exp": json_tp("qwen3.8-flash-next", "2")}
    found = [{"name": name, "alter": "as-installed", "args": args} for name, args in runs.items()]
    found += [{"name": f"layout {layout}", "alter": "as-installed", "args": ["--model", "jamba", "--max-tp", "2"],
               "env": {"VLLM_SSM_CONV_STATE_LAYOUT": layout}} for layout in ("SD", "ds")]
    for fault in ("mtp-pattern-key", "qwen4exp-mtp-key", "glm-mtp-key"):
        found += [{"name": f"{fault} {name}", "alter": alter, "args": json_tp(tmp / fault / "config.json", "2")}
                  for name, alter in (("as-installed", "as-installed"), ("planted", fault))]
    if release == "0.34":
        found.append({"name": "documented", "alter": "as-installed", "args": ["--all-presets"]})
    return found


@pytest.fixture(params=sorted(RELEASES))
def driven(request, ran) -> tuple[str, dict]:
    """Each run of RUNS in vLLM ``request.param``'s environment, by name."""
    return request.param, ran(request.param)


def _plan(command: str) -> dict:
    words = shlex.split(command)
    assert words[:2] == ["mambaxfer", "plan"], command
    result = run_cli(*words[1:], "--format", "json")
    assert result.code == 0, result.stderr
    return json.loads(result.stdout)


def test_an_altered_remote_conv_offsets_differs_with_a_reproducible_case(driven):
    release, runs = driven
    run = runs["remote_conv_offsets"]
    assert run["code"] == 1
    function = by_function(run["document"])["remote_conv_offsets"]
    assert function["outcome"] == "differs"
    first = function["first_difference"]
    # Altered only where a D rank reads a slice of P's page (tp_ratio > 1): jamba 1P2D, D rank 0 first.
    assert first["case"] == "jamba, P TP 1 / D TP 2, D rank 0"
    row = 3 * 2      # conv_kernel - 1 rows of bf16 (Jamba's mamba_d_conv 4)
    assert first["vllm"] == [[offset + row, size] for offset, size in first["mambaxfer"]]
    # The command shows mambaxfer's side of that very case.
    plan = _plan(first["command"])
    (read,) = plan["reads"]
    assert [[s["remote_offset"], s["size"]] for s in read["segments"] if s["region"] != "ssm"] == first["mambaxfer"]
    # The altered reads are wrong bytes as well.
    assert by_function(run["document"])["bytes right (exact plan)"]["outcome"] == "differs"


def test_an_altered_compute_desc_ids_differs_with_a_reproducible_case(driven):
    release, runs = driven
    run = runs["_compute_desc_ids"]
    assert run["code"] == 1
    function = by_function(run["document"])["_compute_desc_ids"]
    assert function["outcome"] == "differs" and function["differing"] == function["cases"]
    first = function["first_difference"]
    assert first["vllm"]["list"] == "local IDs"
    assert first["vllm"]["ids"] == [i + 1 for i in first["mambaxfer"]["ids"]]
    plan = _plan(first["command"])
    (read,) = [r for r in plan["descriptors"]["reads"] if r["p_rank"] == first["mambaxfer"]["P rank"]]
    at = first["mambaxfer"]["first differing index"]
    assert read["local_ids"][at:at + len(first["mambaxfer"]["ids"])] == first["mambaxfer"]["ids"]


def test_a_vllm_reading_other_attention_heads_differs_at_the_tp_size_it_starts(driven):
    release, runs = driven
    run = runs["heads"]
    assert run["code"] == 1
    functions = by_function(run["document"])
    first = functions["verify_with_parallel_config"]["first_difference"]
    # Jamba's 32 heads read as 96: vLLM starts TP 3, which mambaxfer (32 heads) refuses.
    assert first["case"] == "jamba, TP 3"
    assert first["vllm"] == "starts"
    assert first["mambaxfer"].startswith("refuses: Total number of attention heads (32)")
    assert functions["ModelRegistry"]["outcome"] == "agrees"


def test_a_registry_that_removed_the_architecture_differs(driven):
    release, runs = driven
    run = runs["registry"]
    assert run["code"] == 1
    function = by_function(run["document"])["ModelRegistry"]
    assert function["outcome"] == "differs"
    first = function["first_difference"]
    assert first["vllm"].startswith("Model architecture JambaForCausalLM was supported in vLLM until v0.1.0")
    assert first["mambaxfer"] == "served"


def test_the_model_class_state_follows_the_config_hook(driven):
    """Without Nemotron-H's config hook vLLM's class keeps the SSM state in the model dtype: the
    class-state comparison differs (and only it: the other functions take mambaxfer's dtypes)."""
    release, runs = driven
    run = runs["nemotron-hook"]
    assert run["code"] == 1
    functions = by_function(run["document"])
    state = functions["get_mamba_state_*_from_config"]
    assert state["outcome"] == "differs" and state["differing"] == state["cases"] > 0
    first = state["first_difference"]
    assert first["vllm"]["dtypes (conv, temporal)"] == ["bfloat16", "bfloat16"]
    assert first["mambaxfer"]["dtypes (conv, temporal)"] == ["bfloat16", "float32"]
    assert first["vllm"]["state bytes (conv, temporal)"][1] * 2 == first["mambaxfer"]["state bytes (conv, temporal)"][1]
    assert [f["function"] for f in run["document"]["functions"] if f["outcome"] != "agrees"] == [state["function"]]


def test_a_stand_in_without_an_attribute_vllm_reads_could_not_be_called(driven):
    release, runs = driven
    run = runs["drop"]
    assert run["code"] == 1
    functions = by_function(run["document"])
    ids = functions["_compute_desc_ids"]
    assert ids["outcome"] == "could not be called"
    assert ids["could_not_be_called"]["attribute"] == "_ple_group_index"
    assert "_ple_group_index" in ids["could_not_be_called"]["reason"]
    # What does not read the worker stand-in is still compared.
    assert functions["derive_mamba_conv_split"]["outcome"] == "agrees"
    jsonschema.Draft202012Validator(document_schema("conformance")).validate(run["document"])


def test_a_short_kv_cache_group_posts_the_ids_of_its_release(driven):
    """vLLM 0.34's _compute_desc_ids covers only the regions that hold a layer of the group
    (nixl/base_worker.py, with the pairs of _pair_regions); 0.33's covers every region. Bamba-9B:
    29 SSM layers in 10 groups over 3 tensors, the last group holding 2 layers, then one attention
    group. With one block per group, nine full SSM groups post 3 tensors x 4 regions = 12 IDs each,
    the short one 2 x 4 = 8 (0.34) or 12 (0.33), attention 3: 119 or 123 IDs. vLLM's code and
    mambaxfer's plan for that release agree."""
    release, runs = driven
    ids = by_function(runs["bamba"]["document"])["_compute_desc_ids"]
    assert ids["outcome"] == "agrees" and ids["cases"] > 0
    plan = _plan(f"mambaxfer plan --model {shlex.quote(BAMBA)} --p-tp 1 --d-tp 1 --semantics vllm "
                 f"--vllm-version {release}")
    (read,) = plan["descriptors"]["reads"]
    assert len(read["local_ids"]) == len(read["remote_ids"]) == {"0.33": 123, "0.34": 119}[release]


def test_a_vllm_grouping_the_draft_layers_apart_differs_on_the_drafted_cases(driven):
    """Conformance runs each model whose MTP layers mambaxfer models again with them (vLLM tags
    them is_draft, and its grouping puts them with the target's): a vLLM that kept them apart makes
    other groups and tensors, so _compute_desc_ids differs, and only on the drafted cases."""
    release, runs = driven
    ids = by_function(runs["draft-apart"]["document"])["_compute_desc_ids"]
    assert runs["draft-apart"]["code"] == 1 and ids["outcome"] == "differs", ids
    assert 0 < ids["differing"] < ids["cases"]          # the target's own cases agree
    first = ids["first_difference"]
    assert "--speculative-config" in first["case"]
    plan = _plan(first["command"])                      # the command shows mambaxfer's side of it
    assert plan["model"]["draft_layers"] == 1 and plan["descriptors"]["decode"]["tensors"] == 7


def test_a_vllm_grouping_nemotron_h_draft_layer_apart_differs(driven):
    """The same planted fault on Nemotron-3-Super's MTP attention layer: its drafted cases differ."""
    _, runs = driven
    ids = by_function(runs["draft-apart-nemotron"]["document"])["_compute_desc_ids"]
    assert runs["draft-apart-nemotron"]["code"] == 1 and ids["outcome"] == "differs", ids
    assert 0 < ids["differing"] < ids["cases"] and "--speculative-config" in ids["first_difference"]["case"]


def test_a_vllm_grouping_the_qwen4exp_qsa_draft_layer_apart_differs(driven):
    """The same planted fault on Qwen3.8-Flash-Next's MTP layer (a QSA layer, mtp_num_hidden_layers
    1, as vLLM's predictor reads its loaded config): its drafted cases differ, the target's agree."""
    _, runs = driven
    ids = by_function(runs["draft-apart-qwen4exp"]["document"])["_compute_desc_ids"]
    assert runs["draft-apart-qwen4exp"]["code"] == 1 and ids["outcome"] == "differs", ids
    assert 0 < ids["differing"] < ids["cases"] and "--speculative-config" in ids["first_difference"]["case"]
    plan = _plan(ids["first_difference"]["command"])
    assert plan["model"]["draft_layers"] == 1 and plan["descriptors"]["decode"]["tensors"] == 13


def test_a_vllm_qsa_ring_without_the_speculative_rows_differs_on_the_drafted_cases(driven):
    """vLLM's QSA raw-key ring sized without the speculative tokens (planted): the row comparing
    the QSA caches' specs and groups differs on Qwen3.8-Flash-Next with its MTP layer alone."""
    _, runs = driven
    row = by_function(runs["qsa-ring"]["document"])["get_kv_cache_spec (QSA caches)"]
    assert runs["qsa-ring"]["code"] == 1 and row["outcome"] == "differs", row
    assert row["by_model"] == {"qwen3.8-flash-next": {"cases": 2, "differing": 0},
                               "qwen3.8-flash-next + MTP": {"cases": 2, "differing": 2}}, row
    first = row["first_difference"]
    assert first["vllm"]["ring (tokens, page bytes)"] == [[4, 1120]], first
    assert first["mambaxfer"]["ring (tokens, page bytes)"] == [[8, 2240]], first


@pytest.mark.parametrize("fault", ["draft-apart-eagle3", "eagle-heads"])
def test_a_vllm_grouping_or_reading_the_eagle3_drafter_otherwise_differs(driven, fault):
    """Planted faults under --speculative-config: the EAGLE-3 drafter's layer grouped apart, or its
    KV heads read twice over by vLLM's EAGLEConfig (its own pages then), make _compute_desc_ids
    differ; the first differing case's command shows ours."""
    _, runs = driven
    run = runs[fault]
    ids = by_function(run["document"])["_compute_desc_ids"]
    assert run["code"] == 1 and run["document"]["models"] == ["nemotron-h-8b + EAGLE3"]
    assert ids["outcome"] == "differs" and ids["differing"] > 0, ids
    assert "eagle3" in ids["first_difference"]["case"]
    plan = _plan(ids["first_difference"]["command"])
    assert plan["model"]["draft_layers"] == 1 and plan["descriptors"]["decode"]["tensors"] == 5


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_an_eagle3_drafter_agrees_with_vllm(release, ran):
    """--speculative-config with Llama-3-70B's EAGLE-3 drafter on Nemotron-H-8B: every function of
    vLLM's on the drafted model (its layer in the attention group, tagged is_draft) agrees; so does
    every function with a drafter whose pages are not the target's (Qwen3.5-4B's on Qwen3.5-0.8B:
    its own groups, every page raised to its larger one, descriptor IDs and bytes; MiniCPM-V-4's,
    half the target's page, its own block raised)."""
    document = agreed(ran(release)["eagle3"])
    assert document["models"] == ["nemotron-h-8b + EAGLE3"]
    assert document["ok"] and all(f["outcome"] == "agrees" for f in document["functions"])
    assert by_function(document)["_compute_desc_ids"]["cases"] > 0
    for name in ("eagle3-other-pages", "eagle3-smaller-pages"):     # a drafter page twice, then half, the target's
        document = agreed(ran(release)[name])
        assert document["models"] == ["qwen3.5-0.8b + EAGLE3"]
        assert document["ok"] and all(f["outcome"] == "agrees" for f in document["functions"])
        assert by_function(document)["_compute_desc_ids"]["cases"] > 0


@pytest.mark.parametrize("release", sorted(RELEASES))
@pytest.mark.parametrize("name", sorted(PAST_HEADS))
def test_past_the_kv_heads_every_drafted_case_agrees(release, name, ran):
    """Up to TP 8, past the drafter's and the target's KV heads: each engine groups the drafter as
    its own TP size's ranks hold it, the handshake refuses P and D that group it otherwise (0.34:
    _pair_ssm_regions, before the block sizes; 0.33: an assert on the regions), a drafter's
    smaller kernel blocks pair from the last token by its own block; the pairings whose plan
    leaves the drafter out are named in a note, not compared."""
    document = agreed(ran(release)[f"past-heads {name}"])
    assert document["max_tp"] == 8 and document["ok"], document
    assert by_function(document)["_compute_desc_ids"]["cases"] > 0
    assert by_function(document)["handshake verdict"]["cases"] > 0
    left = [n for n in document["notes"] if "descriptor IDs not compared where" in n]
    assert len(left) == 1 and "(at P/D TP 1/" in left[0] and " 1/8" in left[0], document["notes"]


def test_a_vllm_padding_the_targets_pages_for_the_drafter_differs(driven):
    """The planted fault on a drafter of larger pages (Qwen3.5-4B's on Qwen3.5-0.8B): a vLLM that pads
    the target's pages to the drafter's instead of raising their block (unify_kv_cache_spec_page_size)
    builds other blocks than mambaxfer's."""
    _, runs = driven
    run = runs["pad-pages"]
    blocks = by_function(run["document"])["update_block_size_for_backend"]
    assert run["code"] == 1 and blocks["outcome"] == "differs" and blocks["differing"] > 0, blocks


def test_sglang_refuses_the_speculative_config_in_one_line():
    result = run_cli("conformance", "--engine", "sglang", "--model", "qwen3.5-0.8b", "--speculative-config", EAGLE3)
    assert_user_error(result, "--speculative-config is vLLM's")
    assert len(messages(result.stderr.strip())) == 1


def test_the_drafted_cases_agree_with_vllm(all_presets):
    """With the MTP layers (Qwen3.5, Qwen3-Next), vLLM's own grouping of is_draft specs and its
    _compute_desc_ids agree with the plan's."""
    _, document, _ = all_presets
    assert "qwen3.5-0.8b + MTP" in document["models"] and "qwen3-next-80b + MTP" in document["models"]
    assert by_function(document)["_compute_desc_ids"]["outcome"] == "agrees"


# --- without vLLM --------------------------------------------------------------------------------

def test_without_vllm_one_line_saying_where_to_run_it():
    probe = subprocess.run([sys.executable, "-c", "import importlib.util as u; print(u.find_spec('vllm'))"],
                           capture_output=True, text=True, timeout=60)
    if probe.stdout.strip() != "None":
        pytest.skip("vLLM is installed in the test environment")
    result = run_cli("conformance", "--all-presets")
    assert_user_error(result, "no vLLM is installed", "pip install vllm==0.33.0",
                      "pip install --no-deps -e . from your mambaxfer clone", "docs/conformance.md")
    assert len(messages(result.stderr.strip())) == 1 and not result.stdout


@pytest.mark.parametrize("args, fragment", [
    ((), "give --model M or --all-presets"),
    (("--model", "jamba", "--all-presets"), "give --model M or --all-presets"),
    (("--model", "jamba", "--max-tp", "0"), "--max-tp must be >= 1"),
    (("--model", "jamba", "--max-tp", "65"), "--max-tp 65"),
    (("--model", "jamba", "--draft-model", "x.json"), "--draft-model: SGLang's option"),
])
def test_usage_errors(args, fragment):
    assert_user_error(run_cli("conformance", *args), fragment)


def test_release_rules_are_the_installed_release_or_the_newest_known():
    for release in KNOWN_RELEASES:
        assert release_for(f"{release}.0") == release and release_for(f"{release}.1+cu130") == release
    assert release_for("9.9.0") == KNOWN_RELEASES[-1]
    assert release_for("0.35.0rc1.dev12+gabc") == KNOWN_RELEASES[-1]


def test_the_cli_loads_conformance_only_when_it_runs_and_vllm_only_in_a_run():
    probe = ("import sys; from mambaxfer_cli.cli import run; run(['--help']); "
             "before = sorted(m for m in sys.modules if m.startswith(('mambaxfer_cli.conformance', "
             "'mambaxfer_cli.engines.vllm.conformance', 'vllm'))); "
             "import mambaxfer_cli.engines.vllm.conformance.compare, mambaxfer_cli.engines.vllm.views.conformance; "
             "print(before, sorted(m for m in sys.modules if m.split('.')[0] in ('vllm', 'torch')))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[] []"


def test_only_the_conformance_package_imports_vllm():
    # vLLM's probe (engines/vllm/probe.py) imports vLLM; only conformance imports the probe.
    root = Path(__file__).resolve().parents[1] / "mambaxfer_cli"
    imports = re.compile(r"^\s*(import vllm\b|from vllm\b|from mambaxfer_cli\.engines\.vllm\.probe\b)", re.M)
    naming = sorted(str(p.relative_to(root)) for p in root.rglob("*.py") if imports.search(p.read_text()))
    assert naming and all(p.startswith("engines/vllm/conformance/") or p == "engines/vllm/probe.py"
                          for p in naming), naming
    assert "engines/vllm/probe.py" in naming


# --- the cases and the report, by themselves ---------------------------------------------------------

def test_pairings_are_those_where_one_tp_divides_the_other():
    assert pairings([1, 2, 3, 4]) == [(1, 1), (1, 2), (1, 3), (1, 4), (2, 1), (2, 2), (2, 4), (3, 1), (3, 3),
                                      (4, 1), (4, 2), (4, 4)]


def test_each_flag_variant_is_its_own_command_line():
    lines = {tuple(f.cli()) for f in FLAG_VARIANTS}
    assert len(lines) == len(FLAG_VARIANTS) == 12
    assert Flags().cli() == []
    assert Flags("FLASHINFER", 32, False).cli() == ["--attention-backend", "FLASHINFER", "--block-size", "32",
                                                    "--no-enable-prefix-caching"]


def test_case_commands_run_and_show_mambaxfer_side():
    ours = Ours(release_for(f"{KNOWN_RELEASES[-1]}.0"))
    model, flags = ours.load("jamba"), Flags(prefix_caching=False)
    request = ours.request(model, ours.engine(model, 2, flags, P_NUM_BLOCKS),
                           ours.engine(model, 1, flags, D_NUM_BLOCKS))
    case = Case("jamba", 2, 1, flags=flags, d_rank=0, request=request)
    words = shlex.split(case.command())
    assert words[:2] == ["mambaxfer", "plan"] and "--no-enable-prefix-caching" in words
    result = run_cli(*words[1:], "--format", "json")
    assert result.code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["descriptors"]["request"]["decode_blocks"] == [list(g) for g in request.decode_blocks]
    assert {r["d_rank"] for r in document["reads"]} == {0}
    geometry = shlex.split(Case("jamba", tp=2, flags=Flags("TRITON_ATTN", 32)).command())
    assert geometry[:2] == ["mambaxfer", "inspect"] and run_cli(*geometry[1:]).code == 0


def test_hash_variation_commands_are_preflight_lines_it_reads():
    (mtp,) = [v for v in HASH_VARIATIONS if v.name == "MTP 1 token on P, 2 on D"]
    words = shlex.split(Case("qwen3.5-0.8b", variation=mtp).command())
    assert words[:2] == ["mambaxfer", "preflight"]
    result = run_cli(*words[1:], "--format", "json")
    assert result.code in (0, 1), result.stderr          # a verdict, not a usage error
    document = json.loads(result.stdout)
    assert document["engines"]["prefill"]["num_spec"] == 1 and document["engines"]["decode"]["num_spec"] == 2
    # vLLM does not hash num_speculative_tokens (compute_nixl_compatibility_hash), nor does mambaxfer.
    assert "compat-hash" not in [r["code"] for r in document["vllm"]["refusals"]]


def _synthetic_report() -> Report:
    agreeing = FunctionResult(Function("derive_mamba_conv_split", "the split"))
    agreeing.record(Case("jamba", tp=1), [8192], [8192])
    differing = FunctionResult(Function("update_block_size_for_backend", "each engine's block"))
    differing.record(Case("jamba", tp=1, flags=Flags()), (128, 524288), (80, 327680),
                           ("block 128 tokens = 1 x 128, page 524288 bytes",
                            "block 80 tokens = 1 x 80, page 327680 bytes"))
    broken = FunctionResult(Function("_compute_desc_ids", "IDs"), not_called="_compute_desc_ids: it reads "
                            "'NixlBaseConnectorWorker._ple_group_index', which its stand-in does not carry",
                            attribute="_ple_group_index")
    return Report("0.34.0", "0.33", "H100/H200", ["jamba"], 8, [agreeing, differing, broken], 1.5, ["a note"])


def test_the_report_renders_within_80_columns_with_every_value_whole():
    from rich.console import Console

    from mambaxfer_cli.engines.vllm.views.conformance import render_report
    from mambaxfer_cli.render.console import fit_all

    console = Console(width=80, record=True, highlight=False)
    for part in render_report(_synthetic_report()):
        console.print(fit_all([part], console)[0])
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    for whole in ("update_block_size_for_backend", "✗ differs (1)", "! could not be called", "_ple_group_index",
                  "mambaxfer inspect --model jamba --tp 1", "block 128 tokens = 1 x 128, page 524288 bytes"):
        assert whole in text, whole


def test_the_synthetic_report_follows_the_schema_and_exits_1():
    report = _synthetic_report()
    assert report.exit_code == 1 and not report.ok
    document = report.to_dict()
    jsonschema.Draft202012Validator(document_schema("conformance")).validate({**document, "producer": "x"})
    outcomes = [f["outcome"] for f in document["functions"]]
    assert outcomes == ["agrees", "differs", "could not be called"]


def test_a_tally_keeps_the_first_difference_and_counts_per_model():
    tally = CaseTally()
    assert tally.record(Case("a", tp=1), 1, 1)
    assert not tally.record(Case("a", tp=2), 1, 2)
    assert not tally.record(Case("b", tp=1), 3, 4)
    assert (tally.cases, tally.differing) == (3, 2)
    assert tally.first == Difference(Case("a", tp=2), 1, 2)
    assert tally.by_model == {"a": [2, 1], "b": [1, 1]}


def test_a_function_with_no_case_says_so_and_does_not_fail():
    """A function no case of the run applies to (an MLA model's handshake) is 'no case', not
    'agrees': shown as such, skipped in JUnit, and no failure; beside one that agrees, the run is ok."""
    from rich.console import Console

    from mambaxfer_cli.engines.vllm.views.conformance import junit_xml, render_report
    from mambaxfer_cli.render.console import fit_all

    agreeing = FunctionResult(Function("derive_mamba_conv_split", "the split"))
    agreeing.record(Case("kimi-linear-48b", tp=1), [8192], [8192])
    empty = FunctionResult(Function("handshake verdict", "vLLM's first refusal"))
    report = Report("0.34.0", "0.34", "H100", ["kimi-linear-48b"], 2, [agreeing, empty], 1.0, [])
    assert [r.outcome for r in report.results] == ["agrees", "no case"] and report.ok and report.exit_code == 0
    jsonschema.Draft202012Validator(document_schema("conformance")).validate({**report.to_dict(), "producer": "x"})
    console = Console(width=80, record=True, highlight=False)
    for part in render_report(report):
        console.print(fit_all([part], console)[0])
    text = console.export_text()
    assert "– no case" in text and "1 agree, 1 with no case" in text
    cases = ET.fromstring(junit_xml(report)).findall(".//testcase")
    assert [c.find("skipped") is not None for c in cases] == [False, True]
    assert all(c.find("failure") is None for c in cases)


def test_the_layout_qsa_declares_decides_the_engines_layout_and_the_head_split(driven):
    """With vLLM's QSA backend declaring no layouts, a Qwen4Exp engine would run the connector's
    LBHNC: the layout comparison differs, and so does the handshake wherever the heads split (vLLM
    then accepts what mambaxfer refuses), and the QSA caches' groups (outside a block-outermost
    layout get_kv_cache_groups puts the compressed keys in a group of their own); nothing else does."""
    run = driven[1]["qsa-layouts"]
    assert run["code"] == 1
    functions = by_function(run["document"])
    layout = functions["resolve_kv_cache_layout"]
    assert layout["outcome"] == "differs"
    first = layout["first_difference"]
    assert first["case"].endswith("VLLM_KV_CACHE_LAYOUT unset")
    assert (first["vllm"], first["mambaxfer"]) == ("LBHNC", "BLNHC")
    handshake = functions["handshake verdict"]
    assert handshake["outcome"] == "differs"
    assert handshake["first_difference"]["vllm"].startswith("accepts")
    assert "Heterogeneous TP head-dimension splitting requires contiguous heads" in \
        handshake["first_difference"]["mambaxfer"]
    qsa = functions["get_kv_cache_spec (QSA caches)"]["first_difference"]
    assert any("compressed keys" in g and "attention" not in g for g in qsa["vllm"]["groups"]), qsa
    # the regions vLLM registers are those of the layout it runs: their descriptor IDs differ too
    assert sorted(f["function"] for f in run["document"]["functions"] if f["outcome"] != "agrees") == \
        ["_compute_desc_ids", "get_kv_cache_spec (QSA caches)", "handshake verdict", "resolve_kv_cache_layout"]


def test_qwen4exp_descriptor_ids_are_compared_under_every_backend(driven):
    """QSA layers run their own backend whatever --attention-backend says: under FLASHINFER too
    the block is one kernel block, so vLLM's register_kv_caches lays out the ring's view and every
    case's IDs are compared (none refused as "cannot be partitioned")."""
    release, runs = driven
    ids = by_function(runs["qwen4exp"]["document"])["_compute_desc_ids"]
    assert ids["cases"] > 0 and ids["differing"] == 0 and not ids.get("skipped"), (release, ids)


def test_qwen4exp_descriptor_ids_without_its_qsa_rings_and_ple_state_differ(driven):
    """vLLM registers every QSA ring, compressed-key view and the PLE state of Qwen3.8-Flash-Next
    as regions and groups of their own (register_kv_caches, _compute_desc_ids): as installed, its
    IDs agree with and without its MTP layer; mambaxfer grouping the layers without them (planted,
    as before) differs on every case, its SSM IDs starting short of vLLM's."""
    release, runs = driven
    ids = by_function(runs["qsa-numbering"]["document"])["_compute_desc_ids"]
    assert runs["qsa-numbering"]["code"] == 1 and ids["differing"] == ids["cases"] > 0, ids
    assert set(ids["by_model"]) == {"qwen3.8-flash-next", "qwen3.8-flash-next + MTP"}
    first = ids["first_difference"]
    assert first["vllm"]["first differing index"] == 0 and first["vllm"]["ids"][0] > first["mambaxfer"]["ids"][0]
    installed = by_function(runs["all-presets"]["document"])["_compute_desc_ids"]["by_model"]
    for name in ("qwen3.8-flash-next", "qwen3.8-flash-next + MTP"):
        assert installed[name]["cases"] > 0 and installed[name]["differing"] == 0, (release, installed[name])
