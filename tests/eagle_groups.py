"""Run in vLLM's interpreter: vLLM's KV-cache groups of a target with an EAGLE drafter's layers.

argv: triples of the target (--model), the drafter's config.json and the TP size (conformance
--speculative-config compares every function on the drafted model: tests/test_conformance.py).
The drafter's KV heads and head size are vLLM's reading of its config (EAGLEConfig, method
eagle3); its layers' specs are vLLM's FullAttentionSpec tagged is_draft (get_kv_cache_spec); the
groups are unify_kv_cache_spec_page_size then _get_kv_cache_groups_uniform_page_size. Prints a
JSON line per triple: vLLM's groups as layer indices, mambaxfer's (``with_drafts``, ``model_grouping``; and
``apart_grouping`` where the pages differ) and those of the drafter's layers appended whatever
their pages. Then, after "classes" and architectures: whether vLLM's class of each implements
SupportsEagle3 (``supports_eagle3``; null: not in its registry).
"""

import dataclasses
import json
import os
import sys

os.environ.setdefault("VLLM_SSM_CONV_STATE_LAYOUT", "DS")      # NIXL's only conv layout, as conformance sets it

from transformers import AutoConfig

from vllm.transformers_utils.configs.eagle import EAGLEConfig
from vllm.v1.core.kv_cache_planning import _get_kv_cache_groups_uniform_page_size, unify_kv_cache_spec_page_size

from mambaxfer_cli.engines.vllm.drafts import apart_grouping, block_scales, planned_at, with_drafts
from mambaxfer_cli.engines.vllm.engine import engine_layout
from mambaxfer_cli.engines.vllm.geometry import EngineFlags
from mambaxfer_cli.engines.vllm.probe import Installed
from mambaxfer_cli.engines.vllm.releases import release
from mambaxfer_cli.engines.vllm.kv_groups import model_grouping
from mambaxfer_cli.planning.model import ATTENTION
from mambaxfer_cli.readers.model_source import load_model


def print_classes(architectures: list[str]) -> None:
    from vllm.model_executor.models.interfaces import supports_eagle3
    from vllm.model_executor.models.registry import ModelRegistry

    classes = {arch: ModelRegistry._try_load_model_cls(arch) for arch in architectures}
    print(json.dumps({arch: None if cls is None else supports_eagle3(cls) for arch, cls in classes.items()}))


def print_groups(target_name: str, drafter_path: str, tp: int) -> None:
    draft = json.load(open(drafter_path))
    eagle = EAGLEConfig(AutoConfig.for_model(**{k: v for k, v in draft.items() if not k.startswith("_")}),
                        method="eagle3")
    heads = eagle.model.num_key_value_heads
    head_size = getattr(eagle.model, "head_dim", None) or eagle.model.hidden_size // eagle.model.num_attention_heads
    target = dataclasses.replace(load_model(target_name), num_spec=3)     # the tokens below
    vllm = Installed()
    rules = release(".".join(vllm.version.split(".")[:2]))
    # the target's own block (_align_hybrid_block_size), which every layer's spec starts from
    block = engine_layout(target, tp, EngineFlags(release=rules), model_grouping(target)).geometry.block_size
    attention = vllm.attention_spec(target, tp, block)
    specs = {f"model.layers.{i}": attention if kind == ATTENTION else
             vllm.mamba_spec(target, tp, block, attention.page_size_bytes) for i, kind in enumerate(target.layers)}
    drafter = vllm.attention_spec(dataclasses.replace(target, num_kv_heads=heads, head_size=head_size), tp, block)
    for j in range(eagle.model.num_hidden_layers):
        specs[f"model.layers.{len(target.layers) + j}"] = dataclasses.replace(drafter, is_draft=True)
    groups = _get_kv_cache_groups_uniform_page_size(unify_kv_cache_spec_page_size(specs))
    speculative = {"method": "eagle3", "model": drafter_path, "num_speculative_tokens": 3}
    drafted = planned_at(with_drafts(target, speculative, rules), tp)
    ours = model_grouping(drafted)
    geometry = engine_layout(drafted, tp, EngineFlags(release=rules), ours).geometry
    attention_blocks = [geometry.block_size // scale if kind == ATTENTION else None
                        for kind, scale in zip(ours.groups, block_scales(drafted, ours, tp))]
    # The planted fault: the drafter's layers appended whatever their pages (as the target's attention).
    appended = dataclasses.replace(target, layers=target.layers + (ATTENTION,) * eagle.model.num_hidden_layers)
    print(json.dumps({"vllm": [[int(name.rsplit(".", 1)[1]) for name in g.layer_names] for g in groups],
                      "ours": [list(m) for m in ours.members], "draft_layers": drafted.draft_layers,
                      # each group's block (attention: tokens) and page bytes, vLLM's and mambaxfer's
                      "vllm_pages": [[None if "Mamba" in type(g.kv_cache_spec).__name__
                                      else g.kv_cache_spec.block_size, g.kv_cache_spec.page_size_bytes]
                                     for g in groups],
                      "our_pages": [[b, geometry.page_bytes] for b in attention_blocks],
                      "appended": [list(m) for m in model_grouping(appended).members],
                      "apart": [list(m) for m in getattr(apart_grouping(target, draft, drafter_path), "members", ())]}))


# One line per (target, drafter, TP) triple, then the classes' line: vLLM is imported once for them all.
triples = sys.argv[1:sys.argv.index("classes")] if "classes" in sys.argv else sys.argv[1:]
for i in range(0, len(triples), 3):
    print_groups(triples[i], triples[i + 1], int(triples[i + 2]))
if "classes" in sys.argv:
    print_classes(sys.argv[sys.argv.index("classes") + 1:])
