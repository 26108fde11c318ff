"""vLLM's start-up rules (planning/startup.py) against the installed vLLM's own code, in each
vLLM environment (MAMBAXFER_TEST_VLLM_0_33 / _0_34): ``ModelConfig.verify_with_parallel_config``
called on a stand-in for every head count and TP size up to 64, and the registry's tables. A planted fault
(our rule off by one head) must disagree."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from test_conformance import RELEASES, run_in_vllm
from mambaxfer_cli.engines.vllm.startup import architectures
from mambaxfer_cli.planning.startup import parallel_refusal

BAMBA = Path(__file__).parent / "fixtures" / "hf-configs" / "ibm-ai-platform__Bamba-9B.partial.json"

PROBE = r'''
import json, sys, types
from vllm.config.model import ModelConfig
from vllm.model_executor.models import registry
out = {"parallel": {}, "served": sorted(registry.ModelRegistry.get_supported_archs()),
       "removed": dict(registry._PREVIOUSLY_SUPPORTED_MODELS)}
for heads in range(0, 65):
    for tp in range(1, 65):
        me = types.SimpleNamespace(model_arch_config=types.SimpleNamespace(total_num_attention_heads=heads),
                                   multimodal_config=None, use_mla=False)
        pc = types.SimpleNamespace(enable_hc_sp=False, tensor_parallel_size=tp, enable_expert_parallel=False,
                                   pipeline_parallel_size=1, decode_context_parallel_size=1,
                                   world_size_across_dp=tp)
        try:
            ModelConfig.verify_with_parallel_config(me, pc)
            out["parallel"][f"{heads}:{tp}"] = None
        except ValueError as exc:
            out["parallel"][f"{heads}:{tp}"] = str(exc)
json.dump(out, sys.stdout)
'''


# Runs each (probe, argv) given in one vLLM process (vLLM imported once): their JSON answers, a line.
PROBES = r'''
import contextlib, io, json, sys
answers = []
for source, argv in json.loads(sys.argv[1]):
    sys.argv, printed = ["-c", *argv], io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(source, {"__name__": "__main__"})
    answers.append(json.loads(printed.getvalue()))
print(json.dumps(answers))
'''
_answers: dict = {}


def vllm_answers(release: str) -> list:
    """PROBE's, MLA_PROBE's and TRANSFORMERS_PROBE's answers in vLLM ``release``'s environment."""
    from mambaxfer_cli.engines.vllm.geometry import MLA_BACKENDS, SPARSE_MLA_BACKENDS

    if release not in _answers:
        probes = [(PROBE, []), (MLA_PROBE, [*MLA_BACKENDS, *SPARSE_MLA_BACKENDS]), (TRANSFORMERS_PROBE, [str(BAMBA)])]
        result = run_in_vllm(release, "-c", PROBES, json.dumps(probes))
        assert result.returncode == 0, result.stderr[-2000:]
        _answers[release] = json.loads(result.stdout.strip().splitlines()[-1])
    return _answers[release]


def ours(heads: int, tp: int, fault: int = 0) -> bool:
    model = type("M", (), {"num_q_heads": heads + fault})()
    return parallel_refusal(model, tp) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_parallel_config_and_registry_agree_with_vllm(release):
    theirs = vllm_answers(release)[0]
    disagree = [k for k, v in theirs["parallel"].items() if (v is None) != ours(*map(int, k.split(":")))]
    assert not disagree, disagree[:5]
    planted = [k for k, v in theirs["parallel"].items() if (v is None) != ours(*map(int, k.split(":")), fault=1)]
    assert planted, "a rule off by one head must disagree with vLLM somewhere"
    table = architectures(release)
    assert table["removed"] == theirs["removed"]
    # the registry's live architectures include those registered at import; ours are the tables'
    assert set(table["served"]) <= set(theirs["served"]), sorted(set(table["served"]) - set(theirs["served"]))
    assert "BambaForCausalLM" not in theirs["served"] and "GraniteMoeHybridForCausalLM" in theirs["served"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))


MLA_PROBE = r'''
import ast, importlib.util, json, sys
from vllm.v1.attention.backends.registry import AttentionBackendEnum

def declared(path):
    """The class's supported_dtypes as its module declares them (some modules need a GPU to import)."""
    module, name = path.rsplit(".", 1)
    tree = ast.parse(open(importlib.util.find_spec(module).origin).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == name:
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and getattr(item.target, "id", "") == "supported_dtypes":
                    return sorted(e.attr for e in item.value.elts)
            return None      # AttentionBackend's default
    raise LookupError(path)

cuda = open(importlib.util.find_spec("vllm.platforms.cuda").origin).read()
backend = open(importlib.util.find_spec("vllm.v1.attention.backend").origin).read()
json.dump({"dtypes": {n: declared(AttentionBackendEnum[n].get_path()) for n in sys.argv[1:]},
           "default": declared("vllm.v1.attention.backend.AttentionBackend"),
           "no_valid": 'f"No valid attention backend found for {cls.device_name} "' in cuda,
           "reason": 'invalid_reasons.append("dtype not supported")' in backend}, sys.stdout)
'''


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_no_mla_backend_runs_float32(release):
    """``mla_dtype_refusal``'s rule against vLLM's own classes: every MLA backend mambaxfer models
    declares ``supported_dtypes`` within float16 and bfloat16 (``validate_configuration`` says
    "dtype not supported" otherwise, and ``CudaPlatform.get_attn_backend_cls`` raises "No valid
    attention backend found for cuda ..." when none is left)."""
    from mambaxfer_cli.engines.vllm.startup import MLA_DTYPES

    theirs = vllm_answers(release)[1]
    assert theirs["no_valid"] and theirs["reason"]
    assert theirs["default"] == sorted(MLA_DTYPES)
    for name, dtypes in theirs["dtypes"].items():
        assert set(dtypes or theirs["default"]) <= set(MLA_DTYPES), (name, dtypes)


TRANSFORMERS_PROBE = r'''
import importlib.util, json, sys, types
from transformers import AutoConfig
from vllm.model_executor.models.registry import ModelRegistry

config = json.load(open(sys.argv[1]))
hf = AutoConfig.for_model(config["model_type"], **{k: v for k, v in config.items() if k != "model_type"})
out = {"layer_types": list(hf.layer_types)}
for impl in ("auto", "vllm"):
    model_config = types.SimpleNamespace(model_impl=impl, hf_config=hf, convert_type="none", runner_type="generate",
                                         model="stand-in", revision=None, code_revision=None, trust_remote_code=False,
                                         _get_transformers_backend_cls=lambda: "TransformersForCausalLM")
    try:
        out[impl] = ModelRegistry.inspect_model_cls(config["architectures"], model_config)[1]
    except ValueError as exc:
        out[impl] = str(exc)
base = importlib.util.find_spec("vllm.model_executor.models.transformers.base").origin
out["words"] = "does not dispatch through the Transformers " in open(base).read()
json.dump(out, sys.stdout)
'''


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_a_removed_architecture_goes_to_the_transformers_backend_as_vllm_sends_it(release):
    """``_ModelRegistry.inspect_model_cls`` on Bamba-9B's config: under --model-impl auto
    ``_try_resolve_transformers`` resolves the Transformers backend (so the config passes and the
    heads check runs), under vllm ``_raise_for_unsupported`` gives the removed words; transformers'
    ``layer_types`` names layer 0 as mambaxfer's refusal does (vLLM's TRANSFORMERS_BACKEND)."""
    from mambaxfer_cli.engines.vllm.startup import family_table
    from mambaxfer_cli.engines.vllm.startup import removed_words

    theirs = vllm_answers(release)[2]
    assert theirs["auto"] == "TransformersForCausalLM" and theirs["words"]
    assert theirs["vllm"].startswith(removed_words("BambaForCausalLM", architectures(release)["removed"]
                                                   ["BambaForCausalLM"]))
    assert theirs["layer_types"][0] == family_table("TRANSFORMERS_BACKEND")["BambaForCausalLM"]
