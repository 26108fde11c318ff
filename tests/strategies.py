"""Hypothesis strategies shared by the property tests: random valid models and TP pairings."""

from __future__ import annotations

from math import lcm

from hypothesis import strategies as st

from mambaxfer_cli.planning.dtypes import DTYPE_BYTES
from mambaxfer_cli.planning.model import ModelSpec, Variant
from mambaxfer_cli.planning.variants import VARIANTS


@st.composite
def pairings(draw, max_tp: int = 6, attention: bool = False):
    """(model, P TP, D TP) where both layouts exist; non-multiples (2/3, 4/6, 5/2) included.

    With ``attention``, the model also has attention layers whose KV heads fit both TP sizes
    (one head, replicated everywhere, included).
    """
    p_tp, d_tp = draw(st.integers(1, max_tp)), draw(st.integers(1, max_tp))
    m = lcm(p_tp, d_tp)
    # Short conv and lightning attention are read for SGLang only (vLLM's connector refuses them).
    variant = draw(st.sampled_from([Variant(n) for n, v in VARIANTS.items() if v.backend not in ("SHORT_CONV",
                                                                                                  "LINEAR")]))
    small = st.integers(1, 3)
    if variant == Variant("mamba1"):
        params = {"intermediate_size": m * draw(small), "d_state": draw(small)}
    elif variant == Variant("mamba2"):
        heads, head_dim = m * draw(st.integers(1, 2)), draw(small)
        # n_groups == 1 is replicated wherever TP > 1; otherwise it must divide by both TP sizes.
        params = {"intermediate_size": heads * head_dim, "d_state": draw(small),
                  "n_groups": draw(st.sampled_from([1, m, 2 * m])), "num_heads": heads, "head_dim": head_dim}
    elif variant == Variant("kda"):
        params = {"num_heads": m * draw(st.integers(1, 2)), "head_dim": draw(small)}
    else:
        k_heads = m * draw(st.integers(1, 2))
        params = {"num_k_heads": k_heads, "num_v_heads": k_heads * draw(st.integers(1, 2)),
                  "head_k_dim": draw(small), "head_v_dim": draw(small)}
    layers: tuple[str, ...] = ("ssm",)
    if attention:
        layers = tuple(draw(st.lists(st.sampled_from(["ssm", "ssm", "attention"]), min_size=1, max_size=6)))
        if "ssm" not in layers:
            layers += ("ssm",)
    # KDA's attention is MLA (Kimi-Linear): one latent "head", replicated on every rank.
    mla = variant == Variant("kda") and "attention" in layers and draw(st.booleans())
    model = ModelSpec(
        name="random", source="hypothesis", variant=variant, params=params, layers=layers,
        conv_kernel=draw(st.integers(2, 4)), num_spec=draw(st.integers(0, 2)),
        conv_dtype=draw(st.sampled_from(list(DTYPE_BYTES))), ssm_dtype=draw(st.sampled_from(list(DTYPE_BYTES))),
        num_kv_heads=(1 if mla else draw(st.sampled_from([1, m, 2 * m]))) if "attention" in layers else None,
        head_size=draw(st.sampled_from([1, 4, 16])) if "attention" in layers else None,
        model_dtype=draw(st.sampled_from(["bfloat16", "float32"])), mla=mla)
    return model, p_tp, d_tp
