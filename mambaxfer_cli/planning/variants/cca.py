"""Compressed convolutional attention (Zaya's CCA): a conv window over the query and key heads'
latent channels, sharded by head, and the previous token's hidden state, whole on every rank."""

from mambaxfer_cli.planning.variants import RegionShape, VariantRules, param


VARIANT = VariantRules(
    name="cca", title="CCA", order=7,
    regions=(RegionShape("Q", "conv", "channel", lambda p: p["num_heads"] * p["head_dim"], param("num_heads"),
                         "num_attention_heads"),
             RegionShape("K", "conv", "channel", lambda p: p["num_kv_heads"] * p["head_dim"], param("num_kv_heads"),
                         "num_key_value_heads"),
             RegionShape("prev_hs", "conv", "channel", param("hidden_size"), lambda p: 1, "hidden_size",
                         replicable=True, rows=lambda p: 1)),
    region_ids={"Q": 4, "K": 5, "prev_hs": 13}, colours={"Q": "cyan", "K": "magenta", "prev_hs": "yellow"},
    speculative_rows=False, backend="SHORT_CONV",
)
