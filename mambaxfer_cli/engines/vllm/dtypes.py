"""vLLM's dtypes of a model as its config is read (``Startup.dtypes``): --dtype auto, and the SSM
state's dtype (--mamba-ssm-cache-dtype, the config's ``mamba_ssm_dtype`` where the class reads
it, a family's fixed state, the KDA layers' refusal)."""

from __future__ import annotations

from typing import Any

from mambaxfer_cli.engines.vllm.families import first, gathered
from mambaxfer_cli.errors import Refused
from mambaxfer_cli.planning.dtypes import canonical_dtype
from mambaxfer_cli.readers.model_config import DtypeFacts, Startup

AUTO_FROM_FLOAT32 = "bfloat16"   # vLLM's --dtype auto for a float32 checkpoint (bf16-capable GPUs)


def dtypes(facts: DtypeFacts) -> dict[str, Any]:
    """The model's, conv and SSM dtypes as vLLM starts the model (``DtypeRule``)."""
    family, given_by, ssm_dtype, found, archs = facts.family, facts.given_by, facts.ssm_dtype, facts.ssm, \
        facts.architectures
    (model, model_origin), checkpoint = facts.config, ""
    if facts.dtype:
        model, model_origin = facts.dtype, "--dtype"
    elif model == "float32":     # --dtype auto (config/model.py _resolve_auto_dtype)
        checkpoint, model = model, AUTO_FROM_FLOAT32
        model_origin = (f"{model_origin} float32, which vLLM's --dtype auto runs in {AUTO_FROM_FLOAT32} "
                        f"(_resolve_auto_dtype)")
    conv, conv_origin = (canonical_dtype(facts.conv_dtype), given_by["conv_dtype"]) if facts.conv_dtype else (
        model, model_origin)
    notes: dict[str, str] = {}
    ignored = ""
    # The family modules' MAMBA_SSM_DTYPE_READERS: the architectures whose config hook hands the key to
    # the SSM cache (model_executor/models/config.py MODELS_CONFIG_MAP); every other class ignores it.
    readers = {arch for found in gathered("MAMBA_SSM_DTYPE_READERS") for arch in found}
    if found and found[1] == "mamba_ssm_dtype" and archs and not readers.intersection(archs):
        notes["config_mamba_ssm_dtype"] = found[0]     # what an engine that reads it finds
        ignored = f" (vLLM's {archs[0]} does not read the config's {found[1]} {found[0]})"
        found = None
    sizing = ""
    full_rank = bool(family.backend_state_note)     # its own backend's layer and class read the flag
    kda_flag = full_rank or family.ssm_dtype_fixed == "layer"     # kda_state_dtype reads the flag
    if ssm_dtype and kda_flag and canonical_dtype(ssm_dtype) not in ("float32", "bfloat16"):
        given = canonical_dtype(ssm_dtype)
        raise Refused(f"{given_by['ssm_dtype']} {given}: vLLM does not start: \"KDA recurrent state supports "
                      f"only auto, float32, and bfloat16; got {given}\" (kda_state_dtype)")
    kept = f"{family.label} default: vLLM keeps this family's SSM state in {family.ssm_dtype_default} whatever"
    if ssm_dtype and family.ssm_dtype_fixed:
        given, ssm = canonical_dtype(ssm_dtype), str(family.ssm_dtype_default)
        if family.ssm_dtype_fixed == "layer" and given != ssm:
            sizing = given
            ssm_origin = (f"{family.label}'s KDA layers keep their SSM state in {ssm} whatever the flags "
                          f"({family.fixed_state_source}); vLLM sizes its blocks for a {given} state "
                          f"({given_by['ssm_dtype']}, get_mamba_state_dtype_from_config)")
        else:
            ssm_origin = f"{kept} the flags ({given_by['ssm_dtype']} {given} not read)"
        ssm_dtype = None
    elif ssm_dtype:
        ssm, ssm_origin = canonical_dtype(ssm_dtype), given_by["ssm_dtype"]
    elif family.ssm_dtype_fixed:
        ssm, ssm_origin = str(family.ssm_dtype_default), f"{kept} the flags"
    elif found:
        ssm, ssm_origin = found[0], f"config key {found[1]}"
    elif full_rank:
        ssm = str(family.ssm_dtype_default)
        ssm_origin = f"{family.label} default: {family.backend_state_note.format(dtype=ssm)}"
    elif family.ssm_dtype_default:
        ssm, ssm_origin = family.ssm_dtype_default, f"{kept} torch_dtype says"
    else:
        ssm, ssm_origin = conv, "the conv dtype"
    ssm_origin += ignored if not ssm_dtype else ""
    return {"model_dtype": model, "conv_dtype": conv, "ssm_dtype": ssm, "checkpoint_dtype": checkpoint,
            "sizing_ssm_dtype": sizing, **(first("indexer_kv_dtype", facts) or {}),
            "origin": {"conv_dtype": conv_origin, "ssm_dtype": ssm_origin, "model_dtype": model_origin, **notes}}


DTYPES = Startup(dtypes=dtypes)     # vLLM's dtypes without its start-up checks (``models``)
