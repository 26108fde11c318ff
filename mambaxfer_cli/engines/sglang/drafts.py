"""Speculative decoding's draft KV in SGLang 0.5.23's transfer: the draft model's KV pool both sides
append after the target's KV, in a band of layer ids above the target's (docs/reference.md 9.9)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from mambaxfer_cli.engines.sglang.entries import TransferEntry
from mambaxfer_cli.engines.sglang.families import merged
from mambaxfer_cli.engines.sglang.kv import KV_FIELDS, KVSide
from mambaxfer_cli.errors import Refused, UserError
from mambaxfer_cli.families import dim_key, family_for
from mambaxfer_cli.planning.model import ModelSpec

REFUSES = "SGLang does not start: "
ALIASES = {"NEXTN": "EAGLE"}                  # _resolve_speculative_algorithm_alias
KNOWN = ("DFLASH", "UNO", "DSPARK", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE", "NGRAM", "NEXTN")
MODELLED = ("EAGLE", "EAGLE3", "STANDALONE")  # a draft model with a KV pool; NGRAM has none
# The architectures ModelConfig._config_draft_model gives an MTP draft class of one layer
# (num_nextn_predict_layers = 1) when the draft is the target's own checkpoint: each family's.
MTP_DRAFTS = merged("MTP_DRAFTS")
MTP_CHECKS = merged("MTP_CHECKS")  # refusals of a family's MTP layers


@dataclass(frozen=True)
class Draft:
    """The draft model's KV pool: ``layers`` attention layers of ``num_kv_heads`` heads of
    ``head_size``, numbered from ``band`` (the target's num_hidden_layers) in the transfer."""

    algorithm: str
    source: str
    layers: int
    num_kv_heads: int
    head_size: int
    band: int
    mtp: bool = False                 # an MTP layer of the target's family: a pool of the target's kind

    def side(self, model: ModelSpec, tp: int, page_size: int) -> KVSide:
        return KVSide(replace(model, num_kv_heads=self.num_kv_heads, head_size=self.head_size), tp, page_size)

    def entries(self, model: ModelSpec, tp: int, page_size: int) -> tuple[TransferEntry, ...]:
        """K of every draft layer, then V (``get_contiguous_buf_infos``), one page an item."""
        side = self.side(model, tp, page_size)
        return tuple(TransferEntry(f, self.band + i, side.page_bytes, side.heads)
                     for f in KV_FIELDS for i in range(self.layers))

    def to_dict(self) -> dict:
        return dict(vars(self))


def algorithm(name: str) -> str:
    """--speculative-algorithm as SGLang resolves it (upper case, NEXTN is EAGLE)."""
    upper = name.strip().upper()
    if upper not in KNOWN:
        raise Refused(f"{REFUSES}\"Unknown speculative algorithm name: {name}\" "
                      f"(SpeculativeAlgorithm.from_string; it knows {', '.join(KNOWN)})")
    return ALIASES.get(upper, upper)


def _drafter(path: str) -> dict:
    from mambaxfer_cli.readers.model_source import read_json

    where = Path(path).expanduser()
    return read_json(where / "config.json" if where.is_dir() else where)


def draft_for(model: ModelSpec, name: str | None, draft_path: str | None) -> Draft | None:
    """The draft SGLang builds for ``model`` under ``--speculative-algorithm name`` (None: none, or
    NGRAM's, which has no pool), from ``draft_path``'s config, else the target's own."""
    if name is None:
        if draft_path is not None:
            raise UserError("a draft model (--draft-model; on a launch line --speculative-draft-model-path) needs "
                            "--speculative-algorithm")
        return None
    chosen = algorithm(name)
    if chosen == "NGRAM":
        return None
    if chosen not in MODELLED:
        raise UserError(f"--speculative-algorithm {name}: mambaxfer models the draft KV of NEXTN, EAGLE, EAGLE3 "
                        f"and STANDALONE under --engine sglang, not {chosen}'s")
    config = model.hf_config if draft_path is None else _drafter(draft_path)
    archs = tuple(config.get("architectures") or ())
    band = model.hidden_layers or len(model.layers)
    if archs and archs[0] in MTP_DRAFTS:
        MTP_CHECKS.get(archs[0], lambda _: None)(config)
        if not model.num_kv_heads or not model.head_size:
            raise UserError(f"{model.name}: no attention heads for its MTP layer")
        # One layer whatever the pattern's '*'s: _compute_model_num_layers sizes the pool from
        # num_nextn_predict_layers, which _config_draft_model sets to 1.
        return Draft(chosen, f"{MTP_DRAFTS[archs[0]]}'s layer", 1, model.num_kv_heads, model.head_size, band, True)
    if draft_path is None:
        raise UserError(f"--speculative-algorithm {name}: SGLang 0.5.23 gives {archs[0] if archs else model.name} "
                        f"no MTP draft class (ModelConfig._config_draft_model); give its draft model (--draft-model)")
    from mambaxfer_cli.readers.model_config import flatten_text_config

    flat, where = flatten_text_config(config), draft_path
    if family_for(str(flat.get("model_type", ""))) is not None:
        raise UserError(f"--draft-model {where}: a hybrid draft model ({flat.get('model_type')}); mambaxfer models "
                        "a draft of attention layers only (SGLang gives a hybrid one a HybridLinearKVPool and "
                        "state pools of its own)")
    heads = dim_key(flat, "num_attention_heads", None, where)
    size = dim_key(flat, "head_dim", dim_key(flat, "hidden_size", None, where) // heads, where)
    return Draft(chosen, where, dim_key(flat, "num_hidden_layers", None, where),
                 dim_key(flat, "num_key_value_heads", heads, where), size, band)
