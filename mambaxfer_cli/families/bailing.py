"""Bailing: V3 is KDA + MLA (vLLM's BailingMoeV3ForCausalLM, bailing_moe_v3.py); V2.5's linear
attention vLLM's connector refuses.

V3's KDA heads are the attention heads, and their size is ``qk_rope_head_dim``: transformers'
``BailingHybridConfig.__post_init__`` sets ``head_dim`` from it, whatever the config's own
``head_dim`` (kept as ``linear_head_dim``, which vLLM does not read), and vLLM's KDA state and layer
read ``config.head_dim`` (``_get_kda_state_shape_for_config``). Every ``layer_group_size``-th layer and
the tail are MLA (``_is_kda_layer``); the state dtype takes no --mamba-ssm-cache-dtype, in the layer or
the class: float32.
"""

from __future__ import annotations

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.families import Config, Family, int_key
from mambaxfer_cli.planning.model import ATTENTION, SSM, Variant


def layer_kinds(config: Config, n_layers: int | None, where: str) -> tuple[str, ...]:
    """``_is_kda_layer``: MLA where ``(i + 1) % layer_group_size == 0`` and on the layers past the
    last whole group; KDA elsewhere."""
    if n_layers is None:
        raise UserError(f"{where}: missing key for the layer count: expected num_hidden_layers")
    if "layer_group_size" not in config:
        raise UserError(f"{where}: missing key layer_group_size (every group's last layer is MLA)")
    group = int_key(config, "layer_group_size", 1, where)
    tail = n_layers // group * group
    return tuple(ATTENTION if (i + 1) % group == 0 or i >= tail else SSM for i in range(n_layers))


FAMILIES = (
    Family("Bailing-V3", ("bailing_hybrid",), Variant("kda"),
           {"num_heads": (("num_attention_heads",),), "head_dim": (("qk_rope_head_dim",),)},
           conv_kernel=(("short_conv_kernel_size",),), layer_kinds=layer_kinds,
           ssm_dtype_default="float32", ssm_dtype_fixed="always", mla=True, order=11),
)
