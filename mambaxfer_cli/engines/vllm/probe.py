"""What conformance runs of the installed vLLM: the one module that imports it (``conformance.run``
loads it). Each function is called as the NIXL worker calls it, on a stand-in carrying only what it
reads (``object.__new__`` of vLLM's own worker class), with inputs built by vLLM's own code where it
has any; a stand-in lacking an attribute vLLM reads, or a changed signature, is ``CouldNotCall``."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import importlib
import inspect
import os
import types
from unittest import mock
from typing import Any

import numpy as np

from mambaxfer_cli.engines.vllm.conformance.cases import (
    Flags, Geometry, HashedEngine, Request, flag_variants, qsa_shown,
)
from mambaxfer_cli.planning.model import ATTENTION, ModelSpec
from mambaxfer_cli.engines.vllm.serve_args import CONV_LAYOUT_VAR, KV_LAYOUT_VAR
from mambaxfer_cli.planning.startup import architecture_names
from mambaxfer_cli.engines.vllm.families import first, gathered
from mambaxfer_cli.engines.vllm.drafts import page_ratio
from mambaxfer_cli.errors import UserError

NIXL = "vllm.distributed.kv_transfer.kv_connector.v1.nixl"
# Engine IDs as mambaxfer names the engines (vLLM quotes the remote one in some messages).
P_ENGINE, D_ENGINE = "P", "D"
REGION_BASE = 1 << 40          # region r of a stand-in engine starts at r · REGION_BASE


class CouldNotCall(Exception):
    """A vLLM function could not be called on its stand-in: a signature or an attribute changed."""

    def __init__(self, function: str, reason: str, attribute: str | None = None) -> None:
        super().__init__(f"{function}: {reason}")
        self.function = function
        self.reason = reason
        self.attribute = attribute


class StandIn(types.SimpleNamespace):
    """A named bundle of attributes standing in for one of vLLM's objects."""

    def __init__(self, _name: str, **attributes) -> None:
        super().__init__(**attributes)
        object.__setattr__(self, "_stand_in", _name)

    def __repr__(self) -> str:
        return f"<stand-in {self._stand_in}>"


@contextlib.contextmanager
def calling(function: str):
    """Run vLLM code; what it needs that the stand-in lacks becomes ``CouldNotCall``. vLLM's own
    refusals (AssertionError, RuntimeError, ...) pass through: they are answers."""
    try:
        yield
    except CouldNotCall:
        raise
    except AttributeError as exc:
        name = getattr(exc, "name", None)
        obj = getattr(exc, "obj", None)
        owner = obj._stand_in if isinstance(obj, StandIn) else "None" if obj is None else type(obj).__name__
        what = f"'{owner}.{name}'" if name else str(exc)
        raise CouldNotCall(function, f"it reads {what}, which its stand-in does not carry", name) from None
    except TypeError as exc:
        raise CouldNotCall(function, f"its signature changed: {exc}") from None
    except ImportError as exc:
        raise CouldNotCall(function, f"it is no longer where it was: {exc}") from None


@contextlib.contextmanager
def reading(function: str):
    """Run vLLM's config reader: whatever it (or Transformers under it) raises is ``VllmFails``."""
    try:
        with calling(function):
            yield
    except CouldNotCall:
        raise
    except Exception as exc:
        raise VllmFails(f"{type(exc).__name__}: {_message(exc).splitlines()[-1].strip()}") from None


class VllmFails(Exception):
    """vLLM's own code refused or failed on these inputs: its answer, with its message."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# What vLLM raises when it refuses (its asserts and checks) or breaks on an input.
REFUSALS = (AssertionError, RuntimeError, NotImplementedError, ValueError, StopIteration, KeyError, IndexError,
            ZeroDivisionError)


@contextlib.contextmanager
def answering():
    """vLLM's refusals and failures inside as ``VllmFails`` with its message."""
    try:
        yield
    except REFUSALS as exc:
        raise VllmFails(_message(exc)) from None


def _accepts(function, name: str) -> bool:
    """Whether vLLM's ``function`` (a bound method or a function) takes a parameter ``name``."""
    return name in _parameters(getattr(function, "__func__", function))


@functools.lru_cache(maxsize=None)
def _parameters(function) -> frozenset[str]:
    return frozenset(inspect.signature(function).parameters)


@functools.lru_cache(maxsize=None)
def _symbol(module: str, name: str):
    """vLLM's ``module.name``, looked up once."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise CouldNotCall(f"{module}.{name}", f"not found in the installed vLLM: {exc}", name) from None


def _run(module: str, name: str, *args, **kwargs):
    """vLLM's function ``module.name`` called, ``calling`` it by its name."""
    found = _symbol(module, name)
    with calling(name):
        return found(*args, **kwargs)


def _method(obj, name: str, *args, **kwargs):
    """vLLM's method ``obj.name`` called, ``calling`` it by its name."""
    with calling(name):
        return getattr(obj, name)(*args, **kwargs)


def _new(module: str, name: str, **values):
    """vLLM's class ``module.name`` built with the fields it has (``_construct``)."""
    found = _symbol(module, name)
    with calling(name):
        return _construct(found, **values)


def layout_setting() -> bool:
    """Set ``VLLM_SSM_CONV_STATE_LAYOUT=DS`` (NIXL's only layout) when unset; whether it was unset."""
    before = os.environ.get(CONV_LAYOUT_VAR)
    if before not in (None, "DS"):      # vLLM's NIXL worker asserts DS for any model with Mamba state
        raise UserError(f"{CONV_LAYOUT_VAR}={before}: vLLM's NIXL worker refuses to start under it for a model "
                        f"with Mamba state (3-read Mamba conv transfer requires DS conv state layout), so "
                        f"there is nothing to compare; unset it or set it to DS")
    os.environ[CONV_LAYOUT_VAR] = "DS"
    return before is None


# --- the GPU vLLM is asked about ------------------------------------------------------------

# ``current_platform`` as a CUDA GPU of compute capability 9.0 (H100/H200) and CUDA 13, for vLLM's
# code that asks the platform which kernel it runs.
H100_PLATFORM = StandIn("current_platform", device_name="cuda", is_cuda=lambda: True, is_rocm=lambda: False,
                        is_xpu=lambda: False, is_cpu=lambda: False,
                        is_device_capability=lambda capability: capability in (90, (9, 0)),
                        is_device_capability_family=lambda capability: capability == 90,
                        get_cuda_runtime_major=lambda: 13)


# --- the worker stand-in ------------------------------------------------------------------------

def unpaired_worker() -> dict:
    """The worker state every stand-in worker starts with, whatever its engine: one pipeline stage
    and device, no host buffer, no peer's blocks known yet (new dicts each call)."""
    return {"pp_size": 1, "pcp_size": 1, "dcp_size": 1, "device_id": 0, "use_host_buffer": False, "_has_mamba": True,
            "_transfer_layer_group_ids": (), "_transfer_layer_region_indices": (), "dst_num_blocks": {},
            "dst_region_num_blocks": {}, "dst_region_group_ids": {}, "dst_uses_region_group_mapping": {}}


def worker_attributes(engine: "EngineState", rank: int) -> dict:
    """What the NIXL worker functions conformance calls read of ``self``: the state
    ``register_kv_caches`` leaves for this model, engine geometry and rank."""
    g = engine.geometry
    regions = len(engine.regions)
    return unpaired_worker() | {
        "engine_id": D_ENGINE if engine.role == "decode" else P_ENGINE,
        "tp_rank": rank,
        "tp_size": engine.tp,
        "use_mla": engine.model.mla,
        "block_size": g.kernel_block_size,
        "num_blocks": g.num_blocks,
        "_logical_num_blocks": g.logical_blocks,
        "_physical_blocks_per_logical_kv_block": g.blocks_per_logical,
        "_conv_decomp": engine.conv_split,
        "_mamba_ssm_size": engine.conv_split.ssm_sizes,
        "_ple_group_index": None,
        "_transfer_layer_names": (),
        "_dcp_replicated_groups": set(),
        "_is_hma_required": True,
        "_uses_region_group_mapping": False,
        # the registered state's block counts this engine's (``register_kv_caches`` may have run
        # on fewer blocks: every block of a region is laid out alike)
        "region_num_blocks": [g.num_blocks] * regions,
        "num_descs": g.num_blocks * regions,
        "_regions_by_layer": {name: [r] for r, names in enumerate(engine.regions) for name in names},
        "_layer_specs": engine.layer_specs,
        "region_members": [list(names) for names in engine.regions],
        "kv_cache_layout": engine.kv_cache_layout,
        "host_buffer_kv_cache_layout": engine.kv_cache_layout,
        "enable_permute_local_kv": False,
        "backend_name": engine.backend_name,
        "kv_transfer_config": StandIn("kv_transfer_config", enable_permute_local_kv=False),
        "kv_cache_config": engine.kv_cache_config,
        "vllm_config": StandIn("vllm_config", cache_config=StandIn(
            "vllm_config.cache_config", enable_prefix_caching=g.prefix_caching)),
        "transfer_topo": engine.topology(rank),
        "_dst_pairs": {},
        "tp_mappings": {},
    } | {k: engine.registered[k] for k in EngineState.REGISTERED if k in engine.registered}


@dataclasses.dataclass
class EngineState:
    """One engine (P or D) as the NIXL worker sees it after registering its KV caches."""

    vllm: "Installed"
    model: ModelSpec
    tp: int
    role: str                       # prefill | decode
    geometry: Geometry
    conv_split: Any                      # vLLM's MambaConvSplitInfo (vLLM is not typed here)
    groups: list                    # vLLM's KVCacheGroupSpec list
    regions: list[list[str]]        # layer names held by each KV-cache tensor
    layer_specs: dict
    kv_cache_config: object
    kv_cache_layout: str
    backend_name: str
    # What vLLM's own ``register_kv_caches`` left on a worker that registered this engine's KV
    # caches (GLM-5-Next's packed BLHNC rows); where empty, the regions are stood in as one
    # kernel-block page per layer of every KV-cache group.
    registered: dict = dataclasses.field(default_factory=dict)

    # The worker state ``register_kv_caches`` sets that conformance's functions read.
    REGISTERED = ("block_len_per_layer", "block_stride_per_layer", "region_group_ids", "region_names",
                  "_region_is_mla", "_ssm_region_indices", "_scratch_region_indices", "_group_region_indices",
                  "_uses_region_group_mapping", "_packed_member_layouts", "_ple_region_index", "_ple_block_len",
                  "num_regions", "_head_sharded_draft_regions", "_group_spec_types", "_is_csa_linear",
                  "_ple_group_index")

    def __post_init__(self) -> None:
        if self.registered:
            return
        kernel_bytes, regions = self.geometry.kernel_block_bytes, len(self.regions)
        group_of = {name: index for index, group in enumerate(self.groups) for name in group.layer_names}
        mamba = self.vllm.mamba_spec_class
        self.registered = {
            "block_len_per_layer": [kernel_bytes] * regions, "block_stride_per_layer": [kernel_bytes] * regions,
            # -1 where layers of several groups share a region
            "region_group_ids": [group_of[names[0]] if len({group_of[n] for n in names}) == 1 else -1
                                 for names in self.regions],
            "region_names": [names[0] for names in self.regions],
            "_region_is_mla": [self.model.mla and any(not isinstance(self.layer_specs[n], mamba) for n in names)
                               for names in self.regions],
            "_ssm_region_indices": [r for r, names in enumerate(self.regions)
                                    if any(isinstance(self.layer_specs[n], mamba) for n in names)],
            "_scratch_region_indices": [], "_packed_member_layouts": {}, "_ple_region_index": None,
            "num_regions": regions, "_head_sharded_draft_regions": set(), "_is_csa_linear": False,
            "_group_spec_types": tuple(type(group.kv_cache_spec) for group in self.groups)}

    def topology(self, rank: int):
        return _new("vllm.distributed.kv_transfer.kv_connector.utils", "TransferTopology", tp_rank=rank,
                    tp_size=self.tp, block_size=self.geometry.kernel_block_size,
                    engine_id=D_ENGINE if self.role == "decode" else P_ENGINE, is_mla=self.model.mla,
                    is_mamba=True, total_num_kv_heads=self.model.num_kv_heads or 1, attn_backends=[])

    def worker(self, rank: int, worker_class=None):
        """Rank ``rank``'s stand-in: vLLM's worker class (the pull base unless given), ``worker_attributes``."""
        worker = object.__new__(worker_class or self.vllm.worker_class)
        worker.__dict__.update(worker_attributes(self, rank))
        return worker

    @functools.cached_property
    def metadata(self):
        """What this engine advertises in the NIXL handshake (``NixlAgentMetadata``), built once."""
        g = self.geometry
        regions = len(self.regions)
        registered = self.registered
        return _new(
            f"{NIXL}.metadata", "NixlAgentMetadata", engine_id=P_ENGINE if self.role == "prefill" else D_ENGINE,
            agent_metadata=b"", kv_caches_base_addr=[r * REGION_BASE for r in range(regions)], device_id=0,
            num_blocks=g.num_blocks, block_lens=list(registered["block_len_per_layer"]),
            block_strides=list(registered["block_stride_per_layer"]), kv_cache_layout=self.kv_cache_layout,
            block_size=g.kernel_block_size, ssm_sizes=self.conv_split.ssm_sizes,
            attn_backend_name=self.backend_name,
            physical_blocks_per_logical_kv_block=g.blocks_per_logical,
            region_num_blocks=[g.num_blocks] * regions, region_group_ids=list(registered["region_group_ids"]),
            region_names=list(registered["region_names"]), region_mem_types=["VRAM"] * regions,
            region_members=[list(names) for names in self.regions],
            layer_group_ids={name: index for index, group in enumerate(self.groups) for name in group.layer_names},
            packed_member_layouts=dict(registered["_packed_member_layouts"]),
            ple_block_len=registered.get("_ple_block_len"))


def _once(cache: dict, key, read):
    """``read()`` once per key, its ``VllmFails`` kept and raised again like its value returned."""
    if key not in cache:
        try:
            cache[key] = read()
        except VllmFails as exc:
            cache[key] = exc
    found = cache[key]
    if isinstance(found, VllmFails):
        raise found
    return found


def cached(key):
    """An ``Installed`` method answered once per ``key(*args)`` (``_once``)."""
    def wrap(method):
        @functools.wraps(method)
        def run(self, *args):
            return _once(self.cache, (method.__name__, key(*args)), lambda: method(self, *args))
        return run
    return wrap


def _refusal(function: str, check, *args) -> str | None:
    """vLLM's ``check(*args)``: None where it passes, else the message of the ValueError it raises."""
    with calling(function):
        try:
            check(*args)
        except ValueError as exc:
            return str(exc)
    return None


def _construct(cls, **values):
    """``cls(**values)`` with only the fields ``cls`` has: a field it requires that we do not know
    fails as a changed signature."""
    if dataclasses.is_dataclass(cls):
        names = {f.name for f in dataclasses.fields(cls)}
    else:
        names = set(inspect.signature(cls).parameters)
    return cls(**{k: v for k, v in values.items() if k in names})


# NIXL's wrapper as ``register_kv_caches`` calls it, registering nothing.
NO_NIXL = StandIn("_NoNixl", get_reg_descs=lambda ranges, mem_type: ranges,
                  register_memory=lambda descs, backends=None: None, get_agent_metadata=lambda: b"")


def _descs(rows: np.ndarray) -> list[tuple[int, int, int]]:
    """Strided descriptor rows as (region, offset in it, size)."""
    return [(int(a) // REGION_BASE, int(a) % REGION_BASE, int(n)) for a, n in zip(rows[:, 0], rows[:, 1])]


# --- the installed vLLM -------------------------------------------------------------------------

class Installed:
    """The installed vLLM, imported once, and the stand-ins built from it, cached."""

    def __init__(self) -> None:
        import logging

        import torch
        import vllm

        if "VLLM_LOGGING_LEVEL" not in os.environ:
            # vLLM's warnings about the stand-in engines (padding layers, no NIXL, ...) would bury
            # the report; a level the user chose is kept.
            logging.getLogger("vllm").setLevel(logging.ERROR)
        self.version = getattr(vllm, "__version__", "unknown")
        self.torch = torch
        self.cache: dict = {}           # what ``cached`` methods answered, by method and key
        self._kpool_configs: dict = {}
        self.drafter: tuple[str, dict] | None = None    # an EAGLE drafter's method and config.json

    # vLLM's classes, looked up when first used (one that moved fails the functions that need it).
    @property
    def worker_class(self):
        return _symbol(f"{NIXL}.base_worker", "NixlBaseConnectorWorker")

    @property
    def mamba_spec_class(self):
        return _symbol("vllm.v1.kv_cache_interface", "MambaSpec")

    # --- start-up: the model's config and the registry -----------------------------------------

    @cached(lambda model: model.name)
    def arch_config(self, model: ModelSpec):
        """The model's config through ``get_config`` and the convertor ``ModelConfig.get_model_arch_config``
        picks for its model type (a config vLLM cannot read is ``VllmFails``)."""
        _symbol("vllm.config.model", "ModelConfig")      # the convertor module imports from it
        text_config = _symbol("vllm.transformers_utils.config", "get_hf_text_config")
        module = "vllm.transformers_utils.model_arch_config_convertor"
        convertors = _symbol(module, "MODEL_ARCH_CONFIG_CONVERTORS")
        base = _symbol(module, "ModelArchConfigConvertorBase")
        with self._config_read(model) as hf:
            with reading("ModelConfig.get_model_arch_config"):     # may read the folder again
                convertor = convertors.get(hf.model_type, base)(hf, text_config(hf))
                return convertor.convert(supports_multimodal=False)

    @staticmethod
    @contextlib.contextmanager
    def _config_read(model: ModelSpec):
        """The model's config.json in a folder (kept while in use), as vLLM's reader (``get_config``)
        reads it; what it raises is ``VllmFails``."""
        import json
        import tempfile
        from pathlib import Path

        if not model.hf_config:
            raise VllmFails("no config.json to read (the model was not given as a Hugging Face config)")
        with tempfile.TemporaryDirectory(prefix="mambaxfer-config-") as folder:
            (Path(folder) / "config.json").write_text(json.dumps(dict(model.hf_config)))
            get_config = _symbol("vllm.transformers_utils.config", "get_config")
            with reading("get_config"):
                hf = get_config(folder, trust_remote_code=False)
            yield hf

    @cached(lambda model: model.name)
    def read_hf_config(self, model: ModelSpec):
        with self._config_read(model) as hf:
            return hf

    def class_state(self, model: ModelSpec, tp: int, ssm_cache_dtype: str = "auto") -> tuple:
        """``(shapes, dtypes)`` of the conv and temporal states at TP ``tp`` from the registry's class
        for the config's first served architecture (``get_mamba_state_*_from_config``)."""
        registry = _symbol("vllm.model_executor.models.registry", "ModelRegistry")
        text_config = _symbol("vllm.transformers_utils.config", "get_hf_text_config")
        archs = architecture_names(model.hf_config)
        with calling("ModelRegistry._try_load_model_cls"):
            found = next(((a, c) for a in archs if (c := registry._try_load_model_cls(a)) is not None), None)
        if found is None:
            raise VllmFails(f"the registry loads no class for {', '.join(archs) or 'the config'}")
        arch, model_class = found
        hf = copy.deepcopy(self.read_hf_config(model))    # the config hooks may change it
        # ReplaySSM is refused with any KV connector (VllmConfig's own check), so never on here; the
        # hooks' other settings (prefix caching off) leave the state alone.
        cache_config = StandIn("cache_config", mamba_cache_dtype="auto", mamba_ssm_cache_dtype=ssm_cache_dtype,
                               cache_dtype="auto", use_replayssm=False, enable_prefix_caching=False,
                               mamba_cache_mode="none", mamba_block_size=None, block_size=16)
        parallel = StandIn("parallel_config", tensor_parallel_size=tp, decode_context_parallel_size=1,
                           pipeline_parallel_size=1, use_sequence_parallel_moe=False, enable_dbo=False,
                           ubatch_size=1)

        # The classes size their conv rows by the speculative tokens (get_mamba_state_shape_from_config).
        speculative = (StandIn("speculative_config", num_speculative_tokens=model.num_spec, method="mtp")
                       if model.num_spec else None)

        def with_hf_config(hf_config, architectures=None):
            """The config on ``hf_config``, and ``VllmConfig.with_hf_config``: the same on another (Kimi-K3's
            class hands its text_config to KimiLinearForCausalLM's)."""
            model_config = StandIn("model_config", hf_config=hf_config, hf_text_config=text_config(hf_config),
                                   architecture=(architectures or [arch])[0], dtype=self.dtype(model.model_dtype),
                                   max_model_len=4096, multimodal_config=None)
            return StandIn("vllm_config", model_config=model_config, cache_config=cache_config,
                           parallel_config=parallel, speculative_config=speculative,
                           num_speculative_tokens=model.num_spec, with_hf_config=with_hf_config)

        vllm_config = with_hf_config(hf)
        hooks = _symbol("vllm.model_executor.models.config", "MODELS_CONFIG_MAP")
        if arch in hooks:      # the architecture's config hook runs first (Nemotron-H's, Qwen3.5's SSM dtype)
            with calling(f"{hooks[arch].__name__}.verify_and_update_config"), answering():
                hooks[arch].verify_and_update_config(vllm_config)
        with calling(f"{model_class.__name__}.get_mamba_state_shape_from_config"), answering():
            shapes = model_class.get_mamba_state_shape_from_config(vllm_config)
        with calling(f"{model_class.__name__}.get_mamba_state_dtype_from_config"), answering():
            dtypes = model_class.get_mamba_state_dtype_from_config(vllm_config)
        return tuple(tuple(s) for s in shapes[:2]), tuple(str(d).removeprefix("torch.") for d in dtypes[:2])

    def start_refusal(self, model: ModelSpec, tp: int) -> str | None:
        """``ModelConfig.verify_with_parallel_config`` at TP ``tp``: None where it passes, else vLLM's words."""
        verify = _symbol("vllm.config.model", "ModelConfig").verify_with_parallel_config
        config = StandIn("model_config", model_arch_config=self.arch_config(model), multimodal_config=None,
                         use_mla=False)
        parallel = StandIn("parallel_config", enable_hc_sp=False, tensor_parallel_size=tp,
                           enable_expert_parallel=False, pipeline_parallel_size=1, decode_context_parallel_size=1,
                           world_size_across_dp=tp)
        return _refusal("ModelConfig.verify_with_parallel_config", verify, config, parallel)

    def supports_replayssm(self, architecture: str) -> bool | None:
        """Whether the registry's class for ``architecture`` is ``SupportsReplaySSM`` (None: no class)."""
        registry = _symbol("vllm.model_executor.models.registry", "ModelRegistry")
        supports = _symbol("vllm.model_executor.models.interfaces", "supports_replayssm")
        with calling("ModelRegistry._try_load_model_cls"):
            model_class = registry._try_load_model_cls(architecture)
        return None if model_class is None else bool(supports(model_class))

    def replayssm_refusal(self, case) -> str | None:
        """``VllmConfig.validate_mamba_cached_kernel`` on an engine started with --use-replayssm
        (``case``: an ``engines.vllm.startup.ReplaySSM``): None where it passes, else its message."""
        validate = _symbol("vllm.config.vllm", "VllmConfig").validate_mamba_cached_kernel
        backends = _symbol("vllm.config.mamba", "MambaBackendEnum")
        config = StandIn(
            "vllm_config",
            cache_config=StandIn("cache_config", use_replayssm=True, use_kda_recoverssm=None,
                                 replayssm_buffer_len=case.buffer_len, mamba_cache_mode=case.cache_mode),
            model_config=StandIn("model_config", architecture=case.architecture, supports_replayssm=case.supported,
                                 dtype=self.dtype(case.model_dtype)),
            mamba_config=StandIn("mamba_config", backend=backends[case.backend.upper()],
                                 enable_stochastic_rounding=case.stochastic_rounding),
            parallel_config=StandIn("parallel_config", pipeline_parallel_size=case.pipeline, use_ubatching=False),
            kv_transfer_config=StandIn("kv_transfer_config", is_kv_transfer_instance=True) if case.kv_connector
            else None,
            num_speculative_tokens=case.num_spec, use_v2_model_runner=case.v2_runner)
        return _refusal("VllmConfig.validate_mamba_cached_kernel", validate, config)

    def registry_outcome(self, archs: tuple[str, ...]) -> str:
        """What the installed registry makes of these architectures: "served", the first sentence of
        ``_raise_for_unsupported``'s error for one it removed, or "not served"."""
        registry = _symbol("vllm.model_executor.models.registry", "ModelRegistry")
        with calling("ModelRegistry"):
            if any(arch in registry.get_supported_archs() for arch in archs):
                return "served"
            text = _refusal("ModelRegistry", registry._raise_for_unsupported, list(archs))
        if text is None:
            return "served"
        return text.split(". ")[0] if "was supported in vLLM until" in text else "not served"

    # --- shapes and the conv split ------------------------------------------------------------

    def state_shapes(self, model: ModelSpec, tp: int) -> tuple:
        calculator = _symbol("vllm.model_executor.layers.mamba.mamba_utils", "MambaStateShapeCalculator")
        p = model.params
        with calling("MambaStateShapeCalculator"):
            if model.variant == "mamba1":
                return calculator.mamba1_state_shape(tp, p["intermediate_size"], p["d_state"], model.conv_kernel)
            if model.variant == "mamba2":
                return calculator.mamba2_state_shape(tp, p["intermediate_size"], p["n_groups"], p["num_heads"],
                                                     p["head_dim"], p["d_state"], model.conv_kernel, model.num_spec)
            if model.variant == "kda":
                return calculator.kda_state_shape(tp, p["num_heads"], p["head_dim"],
                                                  conv_kernel_size=model.conv_kernel, num_spec=model.num_spec)
            return calculator.gated_delta_net_state_shape(tp, p["num_k_heads"], p["num_v_heads"], p["head_k_dim"],
                                                          p["head_v_dim"], model.conv_kernel, model.num_spec)

    def state_dtypes(self, model: ModelSpec) -> tuple:
        """The state's dtypes: mambaxfer's, but KDA layers' from ``kda_state_dtype`` (no SSM cache
        dtype passed, as ``KimiGatedDeltaNetAttention.get_state_dtype`` calls it)."""
        if model.variant != "kda":
            return self.dtype(model.conv_dtype), self.dtype(model.ssm_dtype)
        calculator = _symbol("vllm.model_executor.layers.mamba.mamba_utils", "MambaStateDtypeCalculator")
        cache = "auto" if model.conv_dtype == model.model_dtype else model.conv_dtype
        ssm = first("kda_state_dtype_args", model) or ()     # a family's layer passes more
        with calling("MambaStateDtypeCalculator.kda_state_dtype"), answering():
            return tuple(calculator.kda_state_dtype(self.dtype(model.model_dtype), cache, *ssm))

    def mamba_type(self, model: ModelSpec):
        enum = _symbol("vllm.v1.attention.backends.registry", "MambaAttentionBackendEnum")
        return {"mamba1": enum.MAMBA1, "mamba2": enum.MAMBA2, "gdn": enum.GDN_ATTN,
                "kda": enum.GDN_ATTN}[model.variant]   # KimiGatedDeltaNetAttention is a GDN layer

    def dtype(self, name: str):
        return getattr(self.torch, name)

    def mamba_spec(self, model: ModelSpec, tp: int, block_size: int = 16, page: int | None = None):
        with calling("MambaSpec"):
            return _construct(self.mamba_spec_class, block_size=block_size, shapes=self.state_shapes(model, tp),
                              dtypes=self.state_dtypes(model),
                              mamba_type=self.mamba_type(model), page_size_padded=page)

    def attention_spec(self, model: ModelSpec, tp: int, block_size: int):
        name = "MLAAttentionSpec" if model.mla else "FullAttentionSpec"
        spec_class = _symbol("vllm.v1.kv_cache_interface", name)
        heads = 1 if model.mla else max(1, (model.num_kv_heads or 1) // tp)    # MLA: one latent vector per token, no V
        with calling(name):     # cache_dtype_str: the MLA spec's only
            return _construct(spec_class, block_size=block_size, num_kv_heads=heads, head_size=model.head_size,
                              dtype=self.dtype(model.model_dtype), cache_dtype_str="auto")

    @cached(lambda model, tp: (model.name, tp))
    def conv_split(self, model: ModelSpec, tp: int):
        """``derive_mamba_conv_split`` of this model's state spec at TP ``tp``."""
        spec = self.mamba_spec(model, tp)
        with answering():
            return _run("vllm.distributed.kv_transfer.kv_connector.v1.ssm_conv_transfer_utils",
                        "derive_mamba_conv_split", spec, tp)

    # --- KV-cache groups and tensors ----------------------------------------------------------

    def layer_names(self, model: ModelSpec) -> list[str]:
        """The target's layers, then a drafter's: under its MTP module (``mtp.layers.{j}``), or an
        EAGLE drafter's numbered after the target's decoder layers (``start_layer_id``)."""
        target = len(model.layers) - model.draft_layers
        stem, start = ("model.layers", model.hashed_layers) if self.drafter else ("mtp.layers", 0)
        return [(f"model.layers.{i}." if i < target else f"{stem}.{start + i - target}.")
                + ("self_attn.attn" if kind == ATTENTION else "mixer") for i, kind in enumerate(model.layers)]

    @cached(lambda model, tp, geometry: (model.name, tp, geometry))
    def groups(self, model: ModelSpec, tp: int, geometry: Geometry):
        """vLLM's KV-cache groups of the model (``_get_kv_cache_groups_uniform_page_size``) and the
        layers each KV-cache tensor holds (tensor t: the t-th layer of every group)."""
        specs: dict[str, Any] = {}
        mamba = self.mamba_spec(model, tp, geometry.block_size, geometry.page_bytes)
        attention = (self.attention_spec(model, tp, geometry.block_size) if model.has_attention else None)
        for name, kind in zip(self.layer_names(model), model.layers):
            specs[name] = attention if kind == ATTENTION else mamba
        # a drafter's spec starts from the target's own block, which a larger page of its raised (page_ratio)
        draft = self.eagle_spec(model, tp, geometry.block_size // page_ratio(model, tp)) if self.drafter else None
        for name in self.layer_names(model)[len(model.layers) - model.draft_layers:]:
            with calling("KVCacheSpec.is_draft"):   # get_kv_cache_spec's tag of a drafter's layer
                specs[name] = dataclasses.replace(draft or specs[name], is_draft=True)
        if draft is not None:       # get_kv_cache_groups: pages unified before grouping
            specs = _run("vllm.v1.core.kv_cache_planning", "unify_kv_cache_spec_page_size", specs)
        groups = _run("vllm.v1.core.kv_cache_planning", "_get_kv_cache_groups_uniform_page_size", specs)
        width = max(len(group.layer_names) for group in groups)
        regions = [[group.layer_names[t] for group in groups if t < len(group.layer_names)] for t in range(width)]
        config = _new("vllm.v1.kv_cache_interface", "KVCacheConfig", num_blocks=geometry.num_blocks,
                      kv_cache_tensors=[], kv_cache_groups=groups)
        return groups, regions, specs, config

    def apart_groups(self, model: ModelSpec, tp: int, geometry: Geometry) -> list[list[int]]:
        """vLLM's groups, as layer indices, of ``model`` with an EAGLE drafter whose pages are not
        its own: every page raised to the largest (``unify_kv_cache_spec_page_size``), then grouped."""
        n = self.eagle_model().num_hidden_layers
        drafted = dataclasses.replace(model, name=f"{model.name} + apart", draft_layers=n,
                                      layers=model.layers + (ATTENTION,) * n)
        specs = _run("vllm.v1.core.kv_cache_planning", "unify_kv_cache_spec_page_size",
                     self.groups(drafted, tp, geometry)[2])
        names = list(specs)
        groups = _run("vllm.v1.core.kv_cache_planning", "_get_kv_cache_groups_uniform_page_size", specs)
        return [[names.index(name) for name in group.layer_names] for group in groups]

    def mtp_layers(self, model: ModelSpec) -> int:
        """The MTP layers vLLM's predictor builds of its own loaded config, where a family reads
        them there (``mtp_layers_built``); else the planned ones."""
        planned = model.draft_layers and not self.drafter
        built = first("mtp_layers_built", self.read_hf_config(model)) if planned else None
        return model.draft_layers if built is None else built

    def eagle_model(self):
        """An EAGLE drafter's config as ``EAGLEConfig`` reads it."""
        assert self.drafter is not None
        method, config = self.drafter
        eagle = _symbol("vllm.transformers_utils.configs.eagle", "EAGLEConfig")
        with calling("EAGLEConfig"):
            return eagle({k: v for k, v in config.items() if not k.startswith("_")}, method=method).model

    def eagle_spec(self, model: ModelSpec, tp: int, block_size: int):
        """An EAGLE drafter's layers' spec: its KV heads and head size as ``EAGLEConfig`` reads them."""
        draft = self.eagle_model()
        head_size = getattr(draft, "head_dim", None) or draft.hidden_size // draft.num_attention_heads
        return self.attention_spec(dataclasses.replace(model, num_kv_heads=draft.num_key_value_heads,
                                                       head_size=head_size), tp, block_size)

    def qsa_symbols(self) -> tuple:
        """QSA's backend (it declares the layouts its engine may run), raw-key ring and
        compressed-key classes (its family's names by release)."""
        backends, _ = gathered("QSA_CLASSES")[0]
        for module, *names in backends:
            with contextlib.suppress(CouldNotCall):
                return tuple(_symbol(module, name) for name in names)
        home = "/".join(backends[0][0].split(".")[1:3])      # models/<its family's folder>
        raise CouldNotCall(backends[0][1], f"not found in the installed vLLM's {home}")

    def qsa_caches(self, model: ModelSpec, tp: int, geometry: Geometry) -> dict:
        """Qwen4Exp's QSA caches as vLLM builds them (``qsa_specs``), and every group
        ``get_kv_cache_groups`` makes, as layer indices by cache kind."""
        config, specs, kind_of = self.qsa_specs(model, tp, geometry)
        groups = _run("vllm.v1.core.kv_cache_planning", "get_kv_cache_groups", config, specs)
        members = []
        for group in groups:
            found: dict[str, list[int]] = {}
            for name in group.layer_names:
                found.setdefault(kind_of[name][0], []).append(kind_of[name][1])
            members.append(found)
        of = {label: {n for n in specs if kind_of[n][0] == label} for label in ("ring", "compressed keys")}
        return qsa_shown(sorted({(specs[n].block_size, specs[n].page_size_bytes) for n in of["ring"]}),
                         sorted({(specs[n].tokens_per_state, specs[n].page_size_bytes) for n in of["compressed keys"]}),
                         members)

    @cached(lambda model, tp, geometry: (model.name, tp, geometry.block_size))
    def qsa_specs(self, model: ModelSpec, tp: int, geometry: Geometry):
        """A Qwen4Exp engine's config, its layer specs in the order they register (PLE layer, mixer; ring,
        compressed keys, attention: ``get_kv_cache_spec``'s walk) and each layer's (kind, model layer index)."""
        q = model.ple_qsa
        assert q is not None
        _, ring, keys = self.qsa_symbols()
        config = self.vllm_config(model, tp, Flags(block_size=geometry.block_size))
        config.cache_config.kv_cache_layout = self.kv_cache_layout(model, flag_variants(model)[0].backend)
        config.num_speculative_tokens = model.num_spec
        config.compilation_config = StandIn("compilation_config", static_forward_context={})
        config.attention_config = StandIn("vllm_config.attention_config", hisparse_config=None)
        base = self.groups(model, tp, geometry)[2]
        ple = None
        if q.ple_layers:
            found: Any = self._model_class(model, tp)      # vLLM's model class API, stood in
            _, ple_spec = found.get_mamba_specs_from_config(config)
            ple = dataclasses.replace(ple_spec, block_size=geometry.block_size,
                                      page_size_padded=max(geometry.page_bytes, ple_spec.page_size_bytes))
        specs: dict[str, Any] = {}
        kind_of: dict[str, tuple[str, int]] = {}
        key_dtype = self.torch.float8_e4m3fn if q.indexer_kv_dtype == "fp8" else self.torch.bfloat16
        for index, (name, kind) in enumerate(zip(self.layer_names(model), model.layers)):
            if ple is not None and index in q.ple_layers:
                specs[f"model.layers.{index}.ple"] = ple
                kind_of[f"model.layers.{index}.ple"] = ("ple", index)
            for label, cls, dtype, suffix, extra in (
                    ("ring", ring, self.torch.bfloat16, "raw_key_cache", {"cache_rope_positions": q.rope_positions}),
                    ("compressed keys", keys, key_dtype, "compressed_key_cache", {})) if kind == ATTENTION else ():
                prefix = f"{name.removesuffix('attn')}indexer.{suffix}"
                with calling(f"{cls.__name__}.get_kv_cache_spec"):
                    layer = cls(head_size=q.indexer_head_dim, dtype=dtype, cache_config=config.cache_config,
                                prefix=prefix, vllm_config=config, compress_ratio=q.compress_ratio, **extra)
                    specs[prefix] = dataclasses.replace(layer.get_kv_cache_spec(config),
                                                        is_draft=base[name].is_draft)
                kind_of[prefix] = (label, index)
            specs[name] = base[name]
            kind_of[name] = (kind, index)
        return config, specs, kind_of

    @cached(lambda model, backend, requested=None: (model.name, backend, requested))
    def kv_cache_layout(self, model: ModelSpec, backend: str, requested: str | None = None) -> str:
        """``resolve_kv_cache_layout`` for one engine under the NIXL connector and
        ``VLLM_KV_CACHE_LAYOUT=requested``: the layout's name, or "refused: " and vLLM's words."""
        utils = "vllm.v1.attention.backends.utils"
        resolve = _symbol(utils, "resolve_kv_cache_layout")
        backends = [self.backend_class(backend)] if model.has_attention else []
        if model.ple_qsa is not None and model.ple_qsa.has_qsa:
            backends.append(self.qsa_symbols()[0])
        if model.kpool_indexer is not None:      # the indexer's backends, which declare the layouts too
            (indexer, classes), _ = gathered("INDEXER_CLASSES")[0]
            backends += [_symbol(indexer, name) for name in classes]
        names = [layout.name for layout in _run(utils, "get_supported_kv_cache_layouts", backends)]
        specs = [self.mamba_spec(model, 1)] + ([self.attention_spec(model, 1, 16)] if model.has_attention else [])
        config = StandIn("vllm_config",
                         cache_config=StandIn("cache_config", kv_cache_layout=None, enable_extensible_kv_cache=False),
                         kv_transfer_config=StandIn("kv_transfer_config", kv_connector="NixlConnector",
                                                    kv_connector_module_path=None,
                                                    get_from_extra_config=lambda key, default: default),
                         model_config=StandIn("model_config", use_mla=model.mla))
        with mock.patch.dict(os.environ), calling("resolve_kv_cache_layout"):   # the environment restored after
            os.environ.pop(KV_LAYOUT_VAR, None)
            if requested is not None:
                os.environ[KV_LAYOUT_VAR] = requested
            try:
                return resolve(config, [names], specs).name
            except ValueError as exc:
                return f"refused: {exc}"

    @cached(lambda model, tp, geometry, role, backend: (model.name, tp, geometry, role, backend))
    def engine(self, model: ModelSpec, tp: int, geometry: Geometry, role: str, backend: str) -> EngineState:
        if model.kpool_indexer is not None or (model.ple_qsa is not None and model.ple_qsa.has_qsa):
            registered, groups, regions, specs, config = self.packed_registration(model, tp, geometry)
        else:
            registered, (groups, regions, specs, config) = {}, self.groups(model, tp, geometry)
        return EngineState(self, model, tp, role, geometry, self.conv_split(model, tp), groups, regions, specs,
                           config, self.kv_cache_layout(model, backend), backend, registered)

    # --- which P ranks a D rank reads ---------------------------------------------------------

    def tp_mapping(self, decode: EngineState, p_tp: int, d_rank: int):
        return _run(f"{NIXL}.tp_mapping", "compute_tp_mapping", transfer_topology=decode.topology(d_rank),
                    remote_tp_size=p_tp, group_spec_types=decode.registered["_group_spec_types"])

    def sources(self, decode: EngineState, p_tp: int, d_rank: int) -> tuple[list[int], list[int]]:
        """``compute_tp_mapping``: (attention sources, SSM sources) of D rank ``d_rank``."""
        with answering():
            mapping = self.tp_mapping(decode, p_tp, d_rank)
        attention = ssm = []
        for spec_type, ranks in zip(decode.registered["_group_spec_types"], mapping.source_ranks_per_group):
            if issubclass(spec_type, self.mamba_spec_class):
                ssm = list(ranks)
            else:
                attention = list(ranks)
        return attention, ssm

    # --- the SSM reads ------------------------------------------------------------------------

    @staticmethod
    def remote_conv_offsets(decode: EngineState, d_rank: int, ratio: int) -> list[list[int]]:
        """``MambaConvSplitInfo.remote_conv_offsets`` as the worker calls it for D rank ``d_rank``."""
        with calling("remote_conv_offsets"), answering():
            return [list(pair) for pair in decode.conv_split.remote_conv_offsets(d_rank % max(ratio, 1), ratio)]

    def pairs(self, worker, local: EngineState, remote: EngineState):
        """0.34's ``_pair_regions`` of a worker with a remote engine, once per engine (None before 0.34)."""
        if not hasattr(type(worker), "_pair_regions"):
            return None

        def pair():
            return _method(worker, "_pair_regions", remote.metadata), local, remote     # the engines kept alive

        return _once(self.cache, ("pairs", id(local), id(remote), type(worker)), pair)[0]

    @answering()
    def ssm_reads(self, prefill: EngineState, decode: EngineState, d_rank: int, ratio: int):
        """Per P source, D rank ``d_rank``'s reads of one SSM layer as the worker builds them: [(local offset,
        remote offset, local size, remote size)] in sub-projection order, the temporal state last."""
        worker = decode.worker(d_rank)
        info = self.engine_info(prefill)
        meta = prefill.metadata
        pairs = self.pairs(worker, decode, prefill)
        bases = [r * REGION_BASE for r in range(len(decode.regions))]
        local = _method(worker, "_build_mamba_local", bases)
        with calling("_build_mamba_remote"):
            extra = {"pairs": pairs} if _accepts(worker._build_mamba_remote, "pairs") else {}
            remote = worker._build_mamba_remote(meta, ratio, info, **extra)
        k = len(decode.conv_split.local_conv_offsets) + 1
        remote_rows = _descs(remote)[:k]
        if ratio > 0:
            locals_ = [_descs(local)[:k]]
        else:
            plan = self.tp_mapping(decode, prefill.tp, d_rank)
            fa = _method(worker, "_build_fa_local", bases, 1)
            with calling("_build_local_splits_from_plan"):     # a generator: run inside
                splits = list(worker._build_local_splits_from_plan(plan, np.concatenate([fa, local]),
                                                                   int(fa[:, 4].sum()), 1))
            locals_ = [_descs(s[len(fa):])[:k] for s in splits]
        return [[(lo, ro, ls, rs) for (_, lo, ls), (_, ro, rs) in zip(rows, remote_rows)] for rows in locals_]

    def engine_info(self, remote: EngineState, meta=None):
        """What the local worker records of a remote engine at the handshake (``EngineTransferInfo``);
        from ``meta`` where the worker changed what the remote advertised (``split_remote_blocks``)."""
        g = remote.geometry
        block_len, block_size, per_logical = ((g.kernel_block_bytes, g.kernel_block_size, g.blocks_per_logical)
                                              if meta is None else (meta.block_lens[0], meta.block_size,
                                                                    meta.physical_blocks_per_logical_kv_block))
        return _new("vllm.distributed.kv_transfer.kv_connector.utils", "EngineTransferInfo", remote_tp_size=remote.tp,
                    remote_block_len=block_len, remote_block_size=block_size,
                    remote_physical_blocks_per_logical=per_logical, remote_dcp_size=1)

    def register_remote(self, worker, remote: EngineState):
        """The remote engine's metadata as the worker registers it: a copy as ``_split_remote_blocks``
        splits it for an MLA hybrid pulling (not another model, push mode, or a release without it)."""
        meta, info = remote.metadata, self.engine_info(remote)
        if (hasattr(worker, "_split_remote_blocks") and getattr(worker, "_has_mamba", False)
                and getattr(worker, "use_mla", False) and getattr(worker, "_TRANSFER_MODE", "pull") == "pull"):
            meta = copy.deepcopy(meta)
            _method(worker, "_split_remote_blocks", meta)
            info = self.engine_info(remote, meta)
        with calling("register_remote_engine"):
            worker.transfer_topo.register_remote_engine(meta.engine_id, info)
        return meta

    # --- the handshake ------------------------------------------------------------------------

    def handshake(self, prefill: EngineState, decode: EngineState, push: bool = False) -> str | None:
        """vLLM's verdict on D adding P's agent (P D's, pushing), rank by rank: None, or the first refusal."""
        local, remote = (prefill, decode) if push else (decode, prefill)
        worker_class = _symbol(f"{NIXL}.push_worker", "NixlPushConnectorWorker") if push else self.worker_class
        for rank in range(local.tp):
            worker = local.worker(rank, worker_class)
            topology = worker.transfer_topo
            try:
                meta = remote.metadata
                ratio = _method(topology, "tp_ratio", remote.tp)
                if hasattr(worker_class, "_validate_remote_parallel_config"):
                    _method(worker, "_validate_remote_parallel_config", meta)
                pairs = self.pairs(worker, local, remote)
                meta = self.register_remote(worker, remote)
                plan = self.tp_mapping(local, remote.tp, rank)
                block_ratio = _method(topology, "block_size_ratio", meta.block_size)
                # the per-engine state ``add_remote_agent`` records before it validates
                worker.tp_mappings[meta.engine_id] = plan
                worker.dst_num_blocks[meta.engine_id] = meta.num_blocks
                worker.dst_region_num_blocks[meta.engine_id] = list(meta.region_num_blocks)
                worker.dst_region_group_ids[meta.engine_id] = list(meta.region_group_ids)
                worker.dst_uses_region_group_mapping[meta.engine_id] = False
                if pairs is not None:
                    worker._dst_pairs[meta.engine_id] = pairs
                _method(worker, "_validate_remote_agent_handshake", meta, remote.tp)
                bases = [r * REGION_BASE for r in range(len(local.regions))]
                if _method(worker, "_needs_split_local_xfer_handles", ratio, plan):
                    fa = _method(worker, "_build_fa_local", bases, block_ratio)
                    src = np.concatenate([fa, _method(worker, "_build_mamba_local", bases)])
                    with calling("_build_local_splits_from_plan"):
                        list(worker._build_local_splits_from_plan(plan, src, worker.num_descs * block_ratio,
                                                                  block_ratio))
                _method(worker, "_build_fa_remote", plan, meta, block_ratio)
            except CouldNotCall:
                raise
            except REFUSALS as exc:
                return _message(exc)
        return None

    # --- descriptor IDs -----------------------------------------------------------------------

    @answering()
    def descriptor_ids(self, prefill: EngineState, decode: EngineState, d_rank: int,
                       request: Request) -> dict[int, tuple[list[int], list[int]]]:
        """The (local, remote) descriptor IDs D rank ``d_rank`` posts each P source (``_compute_desc_ids``)."""
        worker = decode.worker(d_rank)
        # P's blocks as the worker sees them: split into gcd-sized kernel blocks for an MLA hybrid
        meta = self.register_remote(worker, prefill)
        p_kernel, p_ppl = meta.block_size, meta.physical_blocks_per_logical_kv_block
        block_ratio = _method(worker.transfer_topo, "block_size_ratio", p_kernel)
        plan = self.tp_mapping(decode, prefill.tp, d_rank)
        pairs = self.pairs(worker, decode, prefill)
        d_ppl = decode.geometry.blocks_per_logical
        with calling("_logical_to_kernel_block_ids"):
            local, remote = (worker._logical_to_kernel_block_ids([list(g) for g in blocks], ppl) for blocks, ppl
                             in ((request.decode_blocks, d_ppl), (request.prefill_blocks, p_ppl)))
        last_token = hasattr(type(worker), "_pair_blocks_by_last_token")
        different = decode.geometry.kernel_block_size != p_kernel or p_ppl != d_ppl
        if last_token and different:
            local, remote, _ = _method(worker, "_pair_blocks_by_last_token", local, remote, request.tokens,
                                       block_ratio, p_ppl)
        out = {}
        for rank in plan.all_source_ranks:
            local_ids = [list(g) if rank in plan.source_ranks_per_group[i] else [] for i, g in enumerate(local)]
            remote_ids = [list(g) if rank in plan.source_ranks_per_group[i] else [] for i, g in enumerate(remote)]
            if block_ratio > 1 and not last_token:
                local_ids, remote_ids = _method(worker, "_map_block_ids_for_block_size_ratio", local_ids,
                                                remote_ids, block_ratio)
            if not any(len(g) for g in local_ids):
                continue            # a full prefix hit: vLLM only notifies P
            local_ids, remote_ids = _method(worker, "_apply_prefix_caching", local_ids, remote_ids, d_ppl, p_ppl)
            remote_side = self._ids(worker, remote_ids, meta.num_blocks, None, p_ppl, pairs, "remote")
            out[rank] = (self._ids(worker, local_ids, decode.geometry.num_blocks, block_ratio, d_ppl, pairs, "local"),
                         remote_side)
        return out

    @staticmethod
    def _ids(worker, blocks, num_blocks: int, ratio, ppl: int, pairs, side: str) -> list[int]:
        compute = worker._compute_desc_ids
        with calling("_compute_desc_ids"):
            extra = {}
            if _accepts(compute, "pairs"):
                if pairs is None:
                    raise CouldNotCall("_compute_desc_ids", "it takes region pairs, but this vLLM has no "
                                       "_pair_regions to make them")
                extra["pairs"] = (pairs.remote if side == "remote" else pairs.local, pairs.group)
                if side == "remote" and _accepts(compute, "ssm_regions"):
                    extra["ssm_regions"] = pairs.remote_ssm_regions
            ids = compute(blocks, num_blocks, ratio, ppl, **extra)
        return [int(i) for i in np.asarray(ids).ravel()]

    # --- engine geometry ----------------------------------------------------------------------

    def backend_class(self, name: str):
        enum = _symbol("vllm.v1.attention.backends.registry", "AttentionBackendEnum")
        with calling("AttentionBackendEnum"):
            return enum[name].get_class()

    def qsa_backend(self):
        """The backend Qwen4Exp's QSA layers run whatever ``--attention-backend`` says (its family's
        names by release), its model's module imported first as vLLM does (their imports circle)."""
        importlib.import_module(gathered("QSA_CLASSES")[0][1][0])
        module, names = gathered("QSA_BACKEND_CLASS")[0]
        for name in names:
            with contextlib.suppress(CouldNotCall):
                return _symbol(module, name)
        raise CouldNotCall(names[0], f"not found in the installed vLLM's {module}")

    def vllm_config(self, model: ModelSpec, tp: int, flags: Flags):
        """A stand-in ``VllmConfig``: a real ``CacheConfig``, and ``forward_context``'s layers."""
        cache = _run("vllm.config.cache", "CacheConfig", block_size=flags.block_size,
                     enable_prefix_caching=flags.prefix_caching)
        heads = model.num_kv_heads or 1
        parallel = StandIn("vllm_config.parallel_config", tensor_parallel_size=tp, pipeline_parallel_size=1,
                           decode_context_parallel_size=1)
        hf_text = StandIn("hf_text_config", **{k: v for k, v in (
            ("linear_key_head_dim", model.params.get("head_k_dim")),
            ("linear_value_head_dim", model.params.get("head_v_dim")),
            ("index_kpool", model.kpool_indexer.index_kpool if model.kpool_indexer else None)) if v is not None})
        model_config = StandIn(
            "vllm_config.model_config", architecture=f"{model.family or model.variant.value}-stand-in",
            model=model.source, dtype=self.dtype(model.model_dtype), use_mla=model.mla,
            is_hybrid=model.has_attention, max_model_len=4096, hf_text_config=hf_text, hf_config=hf_text,
            # MLA: one latent vector per token, whole on every rank (ModelConfig.get_num_kv_heads gives 1)
            get_num_kv_heads=lambda parallel_config: 1 if model.mla else max(
                1, heads // parallel_config.tensor_parallel_size),
            get_total_num_kv_heads=lambda: heads, get_head_size=lambda: model.head_size or 0,
            get_total_num_hidden_layers=lambda: model.hashed_layers,
            get_num_attention_heads=lambda parallel_config: max(1, heads // parallel_config.tensor_parallel_size))
        layers = self.forward_context(model, flags.backend)
        return StandIn(
            "vllm_config", cache_config=cache, model_config=model_config, parallel_config=parallel,
            scheduler_config=StandIn("vllm_config.scheduler_config", enable_chunked_prefill=True,
                                     max_num_batched_tokens=8192, disable_hybrid_kv_cache_manager=False),
            compilation_config=StandIn("vllm_config.compilation_config", static_forward_context=layers),
            additional_config={}, speculative_config=None, kv_transfer_config=None,
            # ReplaySSM is refused with any KV connector (VllmConfig's own check), so never on here.
            use_flashinfer_replayssm=False)

    @cached(lambda model, backend: (model.name, backend))
    def forward_context(self, model: ModelSpec, backend: str) -> dict:
        """Stand-in layers in model order: its variant's SSM mixers, attention layers on ``backend``."""
        mixers = {"mamba1": ("vllm.model_executor.layers.mamba.mamba_mixer", "MambaMixer"),
                  "mamba2": ("vllm.model_executor.layers.mamba.mamba_mixer2", "MambaMixer2")}
        mixer_class = self._gdn_class() if model.variant == "gdn" else _symbol(
            *(first("kda_layer", model) or mixers[model.variant]))     # KDA: its family's class
        attention_class = _symbol("vllm.model_executor.layers.attention.attention", "Attention")
        backend_class = self.backend_class(backend) if model.has_attention else None
        out = {}
        for name, kind in zip(self.layer_names(model), model.layers):
            if kind == ATTENTION:
                if model.kpool_indexer is not None:      # the indexer's two caches, built before the MLA layer
                    out.update(self._indexer_layers(model, name))
                layer = object.__new__(attention_class)
                layer.__dict__["attn_backend"] = backend_class
            else:
                layer = object.__new__(mixer_class)
                layer.__dict__["_checkpoint_alignment"] = None
            out[name] = layer
        return out

    def _indexer_layers(self, model: ModelSpec, attention_name: str) -> dict:
        """One MLA layer's indexer caches (its family's classes, keys then tail ring) as
        ``Indexer.__init__`` registers them, ahead of the MLA layer."""
        g = model.kpool_indexer
        assert g is not None
        prefix = attention_name.removesuffix(".attn").removesuffix(".self_attn") + ".self_attn.indexer"
        out = {}
        # Indexer.__init__: the keys fp8 with a float32 scale per 128 (uint8 bytes), the ring bf16.
        key_bytes = g.index_head_dim + g.index_head_dim // 128 * 4
        _, (caches, (keys, ring)) = gathered("INDEXER_CLASSES")[0]    # its family's classes
        for suffix, cls, head, dtype in (("k_cache", keys, key_bytes, self.torch.uint8),
                                         ("tail_cache", ring, g.index_head_dim, self.torch.bfloat16)):
            layer = object.__new__(_symbol(caches, cls))
            layer.__dict__.update(head_dim=head, prefix=f"{prefix}.{suffix}", dtype=dtype,
                                  _index_kpool=g.index_kpool, cache_config=None)
            out[f"{prefix}.{suffix}"] = layer
        return out

    @staticmethod
    def _gdn_class():
        module = importlib.import_module("vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn")
        mamba_base = _symbol("vllm.model_executor.layers.mamba.abstract", "MambaBase")
        found = [c for c in vars(module).values() if isinstance(c, type) and issubclass(c, mamba_base)
                 and c.__module__ == module.__name__ and "get_prefill_checkpoint_alignment" in vars(c)]
        if not found:
            raise CouldNotCall("GDN layer", "no layer class in qwen_gdn_linear_attn exports a prefill "
                               "checkpoint alignment")
        return found[0]

    def gdn_alignment(self, vllm_config) -> int | None:
        """The GDN layers' prefill checkpoint alignment on the modelled GPU: the prefill backend
        ``_resolve_gdn_prefill_backend`` picks, FlashInfer's checkpoints in align mode."""
        module = importlib.import_module("vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn")
        resolve = _symbol(module.__name__, "_resolve_gdn_prefill_backend")
        aligned = _symbol("vllm.v1.attention.backends.gdn_attn", "FLASHINFER_GDN_CHECKPOINT_ALIGNMENT")
        with calling("_resolve_gdn_prefill_backend"), mock.patch.object(module, "current_platform", H100_PLATFORM):
            _, backend = resolve(vllm_config)
        # GatedDeltaNetAttention.__init__: FlashInfer's prefill exports checkpoints in align mode.
        if vllm_config.cache_config.mamba_cache_mode == "align" and backend == "flashinfer":
            return aligned
        return None

    @cached(lambda model, tp, flags, num_blocks: (model.name, tp, flags, num_blocks))
    @answering()
    def geometry(self, model: ModelSpec, tp: int, flags: Flags, num_blocks: int) -> tuple[Geometry, int]:
        """The engine vLLM builds on the modelled GPU (``update_block_size_for_backend``, then
        ``select_common_block_size``), and the SSM layers' prefill checkpoint alignment it used."""
        config = self.vllm_config(model, tp, flags)
        mamba_config = _symbol("vllm.model_executor.models.config", "MambaModelConfig")
        with calling("MambaModelConfig.verify_and_update_config"):
            mamba_config.verify_and_update_config(config)
        if model.variant == "gdn":
            alignment = self.gdn_alignment(config)
            for layer in config.compilation_config.static_forward_context.values():
                if "_checkpoint_alignment" in layer.__dict__:
                    layer.__dict__["_checkpoint_alignment"] = alignment
        checkpoint = _symbol("vllm.model_executor.layers.mamba.abstract", "get_mamba_prefill_checkpoint_alignment")
        with calling("get_mamba_prefill_checkpoint_alignment"):
            used_alignment = (checkpoint(config) or 1) if config.cache_config.mamba_cache_mode == "align" else 1
        state = self.mamba_spec(model, tp)
        page_state = state.page_size_bytes
        if not model.has_attention:
            cache = config.cache_config
            return Geometry(cache.block_size, cache.block_size, 1, page_state, num_blocks, flags.prefix_caching,
                            False), used_alignment
        platform = self._probe_platform(model, tp)
        registry = _symbol("vllm.model_executor.models", "ModelRegistry")
        with contextlib.ExitStack() as patches, calling("update_block_size_for_backend"):
            patches.enter_context(mock.patch.object(registry, "resolve_model_cls", platform.resolve_model_cls))
            if model.kpool_indexer is not None:   # the indexer's kernel pages by GPU (get_paged_mqa_page_sizes)
                deep_gemm = importlib.import_module("vllm.utils.deep_gemm")
                patches.enter_context(mock.patch.object(deep_gemm, "current_platform", H100_PLATFORM))
            platform.update_block_size_for_backend(config)
        block = config.cache_config.block_size
        spec = self.attention_spec(model, tp, block)
        if self.drafter and model.draft_layers:     # a larger page of its drafter's raises the target's block
            spec = _run("vllm.v1.core.kv_cache_planning", "unify_kv_cache_spec_page_size",
                        {"target": spec, "draft": self.eagle_spec(model, tp, block)})["target"]
            block = spec.block_size
        page = spec.page_size_bytes
        if model.kpool_indexer is not None:
            kernel = self._packed_kernel_block(model, tp, config, spec, page, num_blocks)
        else:
            select = _symbol("vllm.v1.worker.utils", "select_common_block_size")
            set_config = _symbol("vllm.config.vllm", "set_current_vllm_config")
            backend = self.qsa_backend() if model.ple_qsa is not None and model.ple_qsa.has_qsa \
                else self.backend_class(flags.backend)
            with calling("select_common_block_size"), set_config(config):
                kernel = select(block, [backend], [spec])
        return Geometry(block, kernel, block // kernel, page, num_blocks, flags.prefix_caching), used_alignment

    def kpool_kv_cache(self, model: ModelSpec, tp: int, config, attention, page: int, num_blocks: int):
        """A GLM-5-Next engine's KV caches as vLLM plans them (each layer's spec from its class,
        ``get_kv_cache_groups``, ``get_kv_cache_config_from_groups`` in BLHNC), ``num_blocks`` blocks."""
        planning = "vllm.v1.core.kv_cache_planning"
        mamba = self.mamba_spec(model, tp, config.cache_config.block_size, page)
        specs = {}
        config.cache_config.kv_cache_layout = "BLHNC"
        config.cache_config.num_gpu_blocks_override = num_blocks
        config.num_speculative_tokens = model.num_spec
        config.attention_config = StandIn("vllm_config.attention_config", hisparse_config=None)
        for name, layer in config.compilation_config.static_forward_context.items():
            if hasattr(type(layer), "get_kv_cache_spec") and "_index_kpool" in layer.__dict__:
                with calling(f"{type(layer).__name__}.get_kv_cache_spec"):
                    layer.__dict__["cache_config"] = config.cache_config
                    specs[name] = layer.get_kv_cache_spec(config)
            else:
                specs[name] = attention if "attn_backend" in layer.__dict__ else mamba
        groups = _run(planning, "get_kv_cache_groups", config, specs)
        return groups, _run(planning, "get_kv_cache_config_from_groups", config, groups, 1 << 62), specs

    # Blocks the packed engines register on: every block row is laid out alike, so the regions
    # of two are those of any number (their block counts are the engine's, set after).
    REGISTERED_BLOCKS = 2

    @cached(lambda model, tp, geometry: (model.name, tp, geometry.block_size, geometry.kernel_block_size))
    def packed_registration(self, model: ModelSpec, tp: int, geometry: Geometry):
        """``register_kv_caches`` of an engine of packed block rows, on a stand-in, its caches allocated on the CPU:
        the worker state it left, the transfer groups, each region's layers, the layer specs and the config."""
        planning = "vllm.v1.core.kv_cache_planning"
        if model.kpool_indexer is not None:
            planned = self._kpool_configs.get((model.name, tp, geometry.block_size))
            if planned is None:
                raise CouldNotCall("register_kv_caches", f"no KV-cache plan for a {geometry.block_size}-token "
                                                         f"{model.family} engine at TP {tp} (vLLM derived none)")
            config, attention, page = planned
            _, kv_cache_config, _ = self.kpool_kv_cache(model, tp, config, attention, page, self.REGISTERED_BLOCKS)
        else:
            config, specs, _ = self.qsa_specs(model, tp, geometry)
            config.cache_config.num_gpu_blocks_override = self.REGISTERED_BLOCKS
            kv_cache_config = _run(planning, "get_kv_cache_config_from_groups", config,
                                   _run(planning, "get_kv_cache_groups", config, specs), 1 << 62)
        utils = "vllm.v1.worker.utils"
        layout = _symbol("vllm.v1.kv_cache_layout", "KVCacheLayout")[config.cache_config.kv_cache_layout]
        with answering(), calling("allocate_kv_cache"):
            caches = _symbol(utils, "allocate_kv_cache")(kv_cache_config, self.torch.device("cpu"), layout, None)
        representative = _symbol(f"{NIXL}.utils", "get_representative_spec_type")
        uniform = _symbol("vllm.v1.kv_cache_interface", "UniformTypeKVCacheSpecs")
        circular = _symbol("vllm.v1.kv_cache_interface", "CircularBufferSpec")
        groups = list(kv_cache_config.transfer_groups)
        layer_specs: dict = {}
        for group in groups:          # NixlBaseConnectorWorker.__init__: UniformTypeKVCacheSpecs unwrapped
            spec = group.kv_cache_spec
            layer_specs.update(spec.kv_cache_specs if isinstance(spec, uniform)
                               else dict.fromkeys(group.layer_names, spec))
        spec_types = tuple(representative(group.kv_cache_spec) for group in groups)
        csa_linear = any(representative(group.kv_cache_spec) is circular
                         for group in kv_cache_config.kv_cache_groups)
        # NixlBaseConnectorWorker.__init__: a CSA-linear worker's one group of TP-replicated state
        ple_group = next((i for i, group in enumerate(kv_cache_config.kv_cache_groups) if csa_linear
                          and group.layer_names and all(getattr(layer_specs.get(n), "tp_replicated", False)
                                                        for n in group.layer_names)), None)
        worker = object.__new__(self.worker_class)
        worker.__dict__.update(
            unpaired_worker(),
            engine_id="registering", tp_rank=0, transfer_tp_rank=0, transfer_tp_size=tp, tp_size=tp, world_size=tp,
            block_size=geometry.kernel_block_size,
            num_blocks=self.REGISTERED_BLOCKS * geometry.blocks_per_logical,
            _logical_num_blocks=self.REGISTERED_BLOCKS,
            _physical_blocks_per_logical_kv_block=geometry.blocks_per_logical, use_mla=model.mla,
            _is_csa_linear=csa_linear, _has_packed_cache=layout.is_block_outermost,
            kv_cache_layout=layout.name, host_buffer_kv_cache_layout=layout.name,
            host_xfer_buffers={}, kv_buffer_device="cuda", attn_backends=[], backend_name="registering",
            _layer_specs=layer_specs, kv_cache_config=kv_cache_config, nixl_memory_type="VRAM",
            nixl_wrapper=NO_NIXL, nixl_backends=[], _registered_descs=[], block_len_per_layer=[],
            block_stride_per_layer=[], region_group_ids=[], region_names=[], region_num_blocks=[],
            _region_is_mla=[], _ssm_region_indices=[], _scratch_region_indices=[], _head_sharded_draft_kv_heads=None,
            kv_caches_base_addr={"registering": {}},
            dst_region_mem_types={},
            _group_spec_types=spec_types, src_xfer_handles_by_block_size={}, _mixed_mem_types=False,
            _mamba_ssm_size=self.conv_split(model, tp).ssm_sizes, _ple_region_index=None, _ple_block_len=None,
            _ple_group_index=ple_group,
            vllm_config=None, model_config=StandIn("model_config", get_total_num_kv_heads=lambda: model.num_kv_heads),
            # what follows the regions (the local descriptors, the handshake payload) is NIXL's
            register_local_xfer_handler=lambda block_size: (None, None))
        module = importlib.import_module(f"{NIXL}.base_worker")
        with (answering(), calling("register_kv_caches"),
              mock.patch.object(module, "compute_nixl_compatibility_hash", lambda *args, **kwargs: "stand-in")):
            worker.register_kv_caches(caches)
        state = {k: getattr(worker, k) for k in EngineState.REGISTERED if k in worker.__dict__}
        state.update(_group_spec_types=spec_types, _is_csa_linear=csa_linear, _ple_group_index=ple_group)
        members = getattr(worker, "region_members", None) or [[name] for name in worker.region_names]
        return state, groups, [list(names) for names in members], layer_specs, kv_cache_config

    def _packed_kernel_block(self, model: ModelSpec, tp: int, config, attention, page: int, num_blocks: int) -> int:
        """The MLA latent group's kernel block (``prepare_kernel_block_sizes``: never split here)."""
        groups, kv_cache_config, _ = self.kpool_kv_cache(model, tp, config, attention, page, num_blocks)
        self._kpool_configs[(model.name, tp, config.cache_config.block_size)] = (config, attention, page)
        backend_of = {name: layer.get_attn_backend()
                      for name, layer in config.compilation_config.static_forward_context.items()
                      if "attn_backend" in layer.__dict__ or "_index_kpool" in layer.__dict__}
        attn_groups = [[StandIn("AttentionGroup", backend=backend_of.get(group.layer_names[0]),
                                kv_cache_spec=group.kv_cache_spec)] for group in groups]
        kernels = _run("vllm.v1.worker.utils", "prepare_kernel_block_sizes", kv_cache_config, attn_groups)
        latent = next(i for i, group in enumerate(groups) if any(
            "attn_backend" in config.compilation_config.static_forward_context[n].__dict__ for n in group.layer_names))
        return kernels[latent]

    def _model_class(self, model: ModelSpec, tp: int) -> type:
        """The model's class where vLLM would import its code: the state shapes of this model (from
        ``MambaStateShapeCalculator``), and Qwen4Exp's PLE spec (``_ple_model``)."""
        shapes = self.state_shapes(model, tp)
        dtypes = (self.dtype(model.conv_dtype), self.dtype(model.ssm_dtype))

        class StandInModel:
            get_mamba_state_shape_from_config = classmethod(lambda cls, vllm_config: shapes)
            get_mamba_state_dtype_from_config = classmethod(lambda cls, vllm_config: dtypes)

        if model.ple_qsa is not None and model.ple_qsa.ple_layers:
            return self._ple_model(model, StandInModel)
        return StandInModel

    def _probe_platform(self, model: ModelSpec, tp: int):
        """vLLM's ``Platform`` with only the model class stood in (``_model_class``)."""
        platform = _symbol("vllm.platforms.interface", "Platform")
        model_class = self._model_class(model, tp)

        class Probe(platform):  # type: ignore[misc, valid-type]  # vLLM's platform class, found at run time
            @staticmethod
            def resolve_model_cls(*args, **kwargs):
                return model_class, "stand-in"

        return Probe

    def _ple_model(self, model: ModelSpec, gdn: type) -> type:
        """Qwen4Exp's model class as ``_align_hybrid_block_size`` meets it: the GDN spec, and the PLE
        spec of its class's ``get_ple_mamba_state_shape_from_config`` (asked with equivalent keys)."""
        q = model.ple_qsa
        assert q is not None
        _, (module, name) = gathered("QSA_CLASSES")[0]     # its family's class
        ple_class = getattr(importlib.import_module(module), name)
        calculator = _symbol("vllm.model_executor.layers.mamba.mamba_utils", "MambaStateDtypeCalculator")
        probe = self
        text = StandIn("hf_text_config", hidden_size=q.ple_channels, hc_count=1, ngram_size=1,
                       ple_conv_kernel_size=q.ple_state_len + 1)

        class StandInPle(gdn):  # the GDN stand-in above
            @classmethod
            def get_mamba_specs_from_config(cls, vllm_config):
                ple_config = StandIn("vllm_config", model_config=StandIn("model_config", hf_text_config=text),
                                     speculative_config=None)
                with calling(f"{name}.get_ple_mamba_state_shape_from_config"):
                    shapes = ple_class.get_ple_mamba_state_shape_from_config(ple_config)
                with calling("MambaStateDtypeCalculator.short_conv_state_dtype"):
                    dtypes = calculator.short_conv_state_dtype(probe.dtype(model.conv_dtype), "auto")
                spec = probe.mamba_spec_class
                with calling("MambaSpec"):
                    return (_construct(spec, block_size=-1, shapes=gdn.get_mamba_state_shape_from_config(vllm_config),
                                       dtypes=gdn.get_mamba_state_dtype_from_config(vllm_config)),
                            _construct(spec, block_size=-1, shapes=shapes, dtypes=dtypes, tp_replicated=True))

        return StandInPle

    # --- the compatibility hash ---------------------------------------------------------------

    def compatibility_hash(self, model: ModelSpec, engine: HashedEngine) -> str:
        """``compute_nixl_compatibility_hash`` of one engine (every setting of ``engine`` in the
        stand-in config, whether this vLLM hashes it or not)."""
        flags = Flags(engine.backend, engine.block_size, engine.prefix_caching)
        config = self.vllm_config(model, engine.tp, flags)
        config.model_config.dtype = self.dtype(engine.dtype or model.model_dtype)
        config.cache_config.cache_dtype = engine.kv_cache_dtype
        if engine.mamba_ssm_dtype is not None:
            config.cache_config.mamba_ssm_cache_dtype = engine.mamba_ssm_dtype
        if engine.speculative is not None:     # the fields a server sets; vLLM's own class answers the rest
            method, tokens = engine.speculative
            draft = StandIn("speculative_config.draft_model_config", model="draft", revision=None, code_revision=None,
                            hf_config=StandIn("draft_model_config.hf_config"))
            config.speculative_config = Answered(
                _symbol("vllm.config.speculative", "SpeculativeConfig"), "speculative_config", method=method,
                num_speculative_tokens=tokens, draft_model_config=draft, parallel_drafting=False, kv_cache_dtype=None,
                model="draft")
        backends = _symbol("vllm.distributed.kv_transfer.kv_connector.utils", "get_current_attn_backends")
        with calling("get_current_attn_backends"):
            name = backends(config)[0].get_name()
        return _run(f"{NIXL}.metadata", "compute_nixl_compatibility_hash", config, name,
                    "push" if engine.push else "pull")


class Answered(StandIn):
    """A stand-in whose missing attributes are what vLLM's ``cls`` has: its fields' defaults, and
    its properties and methods evaluated on the stand-in."""

    def __init__(self, cls, _name: str, **attributes) -> None:
        super().__init__(_name, **attributes)
        object.__setattr__(self, "_answered_by", cls)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        cls = object.__getattribute__(self, "_answered_by")
        if dataclasses.is_dataclass(cls):
            found = next((f for f in dataclasses.fields(cls) if f.name == name), None)
            if found is not None and found.default is not dataclasses.MISSING:
                return found.default
        member = inspect.getattr_static(cls, name, None)
        if isinstance(member, property) and member.fget is not None:
            return member.fget(self)
        if isinstance(member, (staticmethod, classmethod)):
            return member.__get__(None, cls)
        if callable(member):
            return types.MethodType(member, self)
        raise AttributeError(f"{self._stand_in} has no attribute {name!r}", name=name, obj=self)


def _message(exc: BaseException) -> str:
    """vLLM's message; for an exception without one (a ``next()`` that found nothing, also when a
    generator turned it into a RuntimeError), its type and the vLLM function it came from."""
    cause = exc.__cause__ if isinstance(exc.__cause__, StopIteration) else exc
    text = str(cause).strip()
    if isinstance(cause, StopIteration) or not text:
        where = cause.__traceback__
        while where is not None and where.tb_next is not None:
            where = where.tb_next
        frame = where.tb_frame.f_code.co_name if where is not None else "?"
        return f"{type(cause).__name__} in {frame}" + (f": {text}" if text else "")
    return text


@functools.lru_cache(maxsize=1)
def installed() -> Installed:
    return Installed()
