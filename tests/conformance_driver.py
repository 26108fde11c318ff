"""Run ``mambaxfer conformance`` inside a vLLM environment after altering vLLM (or mambaxfer's
stand-in) in this process, to show that conformance notices. Run by vLLM's interpreter:

    python conformance_driver.py '[{"name": ..., "alter": ALTERATION, "args": [CONFORMANCE ARGS]}, ...]'

Alterations: ``as-installed``; ``remote_conv_offsets`` (vLLM reads one conv row further into P's
page whenever a D rank reads a slice of it); ``_compute_desc_ids`` (vLLM's local IDs off by one);
``drop:ATTRIBUTE`` (mambaxfer's worker stand-in without ATTRIBUTE); ``heads`` (vLLM's architecture
convertor reads three times the attention heads); ``registry`` (vLLM's registry removed Jamba in
0.1.0); ``nemotron-hook`` (vLLM without Nemotron-H's config hook, which keeps its SSM state in
float32); ``qsa-layouts`` (vLLM's QSA backend declaring no KV-cache layouts); ``draft-apart`` (vLLM
grouping a drafter's ``is_draft`` layers apart from the target's; each run looks vLLM's functions
up afresh); ``eagle-heads`` (vLLM's EAGLEConfig reading twice a drafter's KV heads); ``pad-pages`` (vLLM
padding a smaller page to its drafter's larger one instead of raising its block); ``mtp-pattern-key``
(mambaxfer reading Nemotron-H's MTP pattern key and not ``mtp_layers_block_type``);
``qwen4exp-mtp-key`` (mambaxfer counting Qwen4Exp's MTP layers by ``num_nextn_predict_layers``);
``glm-mtp-key`` (mambaxfer counting GLM-5-Next's by ``mtp_num_hidden_layers``, absent: 1);
``qsa-ring`` (vLLM's QSA raw-key ring sized without the speculative tokens); ``qsa-numbering``
(mambaxfer grouping Qwen4Exp's layers without its QSA rings and PLE state). A run's ``env`` is
set for it alone. Prints one JSON object: each run's exit code, document (``{"unparsed": stdout}``
if not JSON) and stderr, by name. One process runs them all: vLLM is imported once.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys


def alter(scenario: str, undo: list) -> None:
    from mambaxfer_cli.engines.vllm import probe as vllm_side

    def patch(owner, name, value):
        undo.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    if scenario == "as-installed":
        return
    if scenario == "remote_conv_offsets":
        from vllm.distributed.kv_transfer.kv_connector.v1.ssm_conv_transfer_utils import MambaConvSplitInfo

        original = MambaConvSplitInfo.remote_conv_offsets

        def shifted(self, local_rank_offset, tp_ratio):
            row = self.conv_rows * self.conv_dtype_size
            return [(offset + (row if tp_ratio > 1 else 0), size)
                    for offset, size in original(self, local_rank_offset, tp_ratio)]

        patch(MambaConvSplitInfo, "remote_conv_offsets", shifted)
    elif scenario == "_compute_desc_ids":
        from vllm.distributed.kv_transfer.kv_connector.v1.nixl.base_worker import NixlBaseConnectorWorker

        original = NixlBaseConnectorWorker._compute_desc_ids

        def off_by_one(self, block_ids, dst_num_blocks, block_size_ratio, *args, **kwargs):
            ids = original(self, block_ids, dst_num_blocks, block_size_ratio, *args, **kwargs)
            return ids + 1 if block_size_ratio is not None else ids     # the local list only

        off_by_one.__wrapped__ = original   # keeps inspect.signature's parameters
        patch(NixlBaseConnectorWorker, "_compute_desc_ids", off_by_one)
    elif scenario == "heads":
        from vllm.transformers_utils.model_arch_config_convertor import ModelArchConfigConvertorBase

        original = ModelArchConfigConvertorBase.get_total_num_attention_heads
        patch(ModelArchConfigConvertorBase, "get_total_num_attention_heads", lambda self: 3 * original(self))
    elif scenario == "registry":
        from vllm.model_executor.models import registry

        patch(registry.ModelRegistry, "models", {k: v for k, v in registry.ModelRegistry.models.items()
                                                 if k != "JambaForCausalLM"})
        patch(registry, "_PREVIOUSLY_SUPPORTED_MODELS",
              {**registry._PREVIOUSLY_SUPPORTED_MODELS, "JambaForCausalLM": "0.1.0"})
    elif scenario == "nemotron-hook":
        from vllm.model_executor.models import config as hooks

        # In place: the probe holds the map it found first (its symbols are looked up once).
        table = hooks.MODELS_CONFIG_MAP
        undo.append((table, "NemotronHForCausalLM", table.pop("NemotronHForCausalLM")))
    elif scenario == "qsa-layouts":
        # QSA's backend declaring no layouts: the engine would run the connector's LBHNC.
        backend = vllm_side.Installed().qsa_symbols()[0]
        patch(backend, "supported_kv_cache_layouts", classmethod(lambda cls: None))
    elif scenario == "qsa-ring":
        import types

        ring = vllm_side.Installed().qsa_symbols()[1]
        original = ring.get_kv_cache_spec
        patch(ring, "get_kv_cache_spec", lambda self, config: original(
            self, types.SimpleNamespace(num_speculative_tokens=0, cache_config=config.cache_config)))
    elif scenario == "draft-apart":
        from vllm.v1.core import kv_cache_planning

        original = kv_cache_planning._get_kv_cache_groups_uniform_page_size
        packed = kv_cache_planning._get_packed_kv_cache_groups

        def split(kv_cache_spec):
            drafts = {name: spec for name, spec in kv_cache_spec.items() if getattr(spec, "is_draft", False)}
            return {name: spec for name, spec in kv_cache_spec.items() if name not in drafts}, drafts

        def apart(kv_cache_spec):
            target, drafts = split(kv_cache_spec)
            return original(target) + (original(drafts) if drafts else [])

        def packed_apart(vllm_config, kv_cache_spec):     # block-outermost rows (Qwen4Exp's QSA caches)
            target, drafts = split(kv_cache_spec)
            found = packed(vllm_config, target)
            if found is None or not drafts:
                return packed(vllm_config, kv_cache_spec)
            return found + (packed(vllm_config, drafts) or original(drafts))

        patch(kv_cache_planning, "_get_kv_cache_groups_uniform_page_size", apart)
        patch(kv_cache_planning, "_get_packed_kv_cache_groups", packed_apart)
    elif scenario == "pad-pages":      # vLLM padding the smaller pages to the largest, their blocks kept
        from dataclasses import replace as replaced

        from vllm.v1.core import kv_cache_planning

        def padded(kv_cache_spec):
            largest = max(spec.page_size_bytes for spec in kv_cache_spec.values())
            return {name: spec if spec.page_size_bytes == largest else replaced(spec, page_size_padded=largest)
                    for name, spec in kv_cache_spec.items()}

        patch(kv_cache_planning, "unify_kv_cache_spec_page_size", padded)
    elif scenario == "eagle-heads":      # vLLM reading twice an EAGLE drafter's KV heads
        from vllm.transformers_utils.configs.eagle import EAGLEConfig

        original = EAGLEConfig.__init__

        def doubled(self, *args, **kwargs):
            original(self, *args, **kwargs)
            self.model.num_key_value_heads *= 2

        patch(EAGLEConfig, "__init__", doubled)
    elif scenario == "mtp-pattern-key":    # mambaxfer reading Nemotron-H's mtp_hybrid_override_pattern alone
        from mambaxfer_cli.engines.vllm.families import nemotron_h

        patch(nemotron_h, "mtp_pattern", lambda config, where: config.get("mtp_hybrid_override_pattern") or "*E")
    elif scenario in ("qwen4exp-mtp-key", "glm-mtp-key"):
        from dataclasses import replace

        from mambaxfer_cli.engines.vllm import drafts

        found = drafts.family_for
        stem, key = (("qwen4_exp", "num_nextn_predict_layers") if scenario == "qwen4exp-mtp-key"
                     else ("glm5_next", "mtp_num_hidden_layers"))
        patch(drafts, "family_for", lambda t: replace(found(t), mtp_keys={t: key})
              if t.startswith(stem) else found(t))
    elif scenario == "qsa-numbering":   # mambaxfer without Qwen4Exp's QSA rings and PLE state as groups
        from mambaxfer_cli.engines.vllm.families import qwen4exp

        patch(qwen4exp, "kv_caches", lambda model: None)
    elif scenario.startswith("drop:"):
        attribute = scenario.split(":", 1)[1]
        original = vllm_side.worker_attributes

        def without(*args, **kwargs):
            attributes = original(*args, **kwargs)
            attributes.pop(attribute)
            return attributes

        patch(vllm_side, "worker_attributes", without)
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")


def main(argv: list[str]) -> None:
    (spec,) = argv
    from mambaxfer_cli.cli import run
    from mambaxfer_cli.engines.vllm import probe as vllm_side

    out = {}
    for item in json.loads(spec):
        undo: list = []
        alter(item["alter"], undo)
        vllm_side.installed.cache_clear()
        vllm_side._symbol.cache_clear()     # each run looks vLLM's functions up afresh
        environ = dict(os.environ)
        os.environ.update(item.get("env", {}))
        captured, errors = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(errors):
                code = run(["conformance", *item["args"]])
        finally:
            os.environ.clear()
            os.environ.update(environ)
            for owner, name, value in reversed(undo):
                if isinstance(owner, dict):
                    owner[name] = value
                else:
                    setattr(owner, name, value)
        text = captured.getvalue()
        try:
            document = json.loads(text)
        except ValueError:
            document = {"unparsed": text}
        out[item["name"]] = {"code": code, "document": document, "stderr": errors.getvalue()}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
