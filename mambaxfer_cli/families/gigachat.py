"""GigaChat3.5: Gated DeltaNet layers beside MLA layers (SGLang's ``configs/gigachat35.py``).

Its layers are ``layer_types``' where the config has them, else linear attention but for
``full_attention_layers`` (``GigaChat35Config._resolve_layer_types``). No vLLM release serves it."""

from __future__ import annotations

from mambaxfer_cli.families import Config, Family, list_key
from mambaxfer_cli.families.qwen3_next import GDN_KEYS
from mambaxfer_cli.planning.model import ATTENTION, SSM, Variant


def layer_kinds(config: Config, n_layers: int | None, where: str) -> tuple[str, ...] | None:
    if "layer_types" in config or n_layers is None:
        return None       # the generic layer_types reading, or its missing-count error
    full = set(list_key(config, "full_attention_layers", int, where)) if "full_attention_layers" in config else set()
    return tuple(ATTENTION if i in full else SSM for i in range(n_layers))


FAMILIES = (
    Family("GigaChat3.5", ("gigachat3_5",), Variant("gdn"), GDN_KEYS, conv_kernel=(("linear_conv_kernel_dim",),),
           ssm_dtype_keys=("mamba_ssm_dtype",), mla=True, layer_kinds=layer_kinds, order=15),
)
