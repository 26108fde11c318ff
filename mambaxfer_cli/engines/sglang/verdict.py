"""SGLang's outcome for one model and pairing: refused, right, or which bytes it corrupts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from mambaxfer_cli.engines.sglang.bootstrap import Server, refusals
from mambaxfer_cli.engines.sglang.families import merged
from mambaxfer_cli.engines.sglang.entries import CONV, TEMPORAL, server_flags
from mambaxfer_cli.engines.sglang.heads import head_slice
from mambaxfer_cli.render.console import tp_pairing
from mambaxfer_cli.engines.sglang.ranks import rank_findings, writers
from mambaxfer_cli.engines.sglang.release import NIXL, SGLANG_0_5_23, Release
from mambaxfer_cli.engines.sglang.shapes import sglang_model
from mambaxfer_cli.engines.sglang.writes import FieldOutcome, check_side, compare, sglang_writes
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.planning.layout import kv_head_shard
from mambaxfer_cli.planning.model import ModelSpec

_STATE_NAMES = {CONV: "conv state", TEMPORAL: "temporal (SSM) state",
                **{f: f"{label} state" for f, label in merged("FIELD_LABELS").items()}}


@dataclass(frozen=True)
class Verdict:
    release: str
    model: str
    p_tp: int
    d_tp: int
    backend: str
    refusal: str | None
    ssm_layers: int
    outcomes: tuple[FieldOutcome, ...]
    findings: tuple[str, ...]          # rank mapping of non-multiple ratios
    heads_wrong: int                   # attention KV heads landed wrong, per layer and token
    fails: str | None = None           # why every request fails before its state moves

    def bad_bytes(self, field: str | None = None) -> int:
        """Bytes wrong for one request, every SSM layer and decode rank together."""
        return sum(o.bad for o in self.outcomes if field in (None, o.field)) * self.ssm_layers

    @property
    def right(self) -> bool:
        return (self.refusal is None and self.fails is None and not self.bad_bytes() and not self.heads_wrong
                and not self.findings)

    def sentence(self) -> str:
        pair = tp_pairing(self.p_tp, self.d_tp)
        if self.refusal:
            return f"{self.release} refuses {self.model} at {pair}: {self.refusal}"
        if self.fails:
            return f"{self.release} fails every request of {self.model} at {pair}: {self.fails}"
        bad = list(dict.fromkeys(o.field for o in self.outcomes if self.bad_bytes(o.field)))
        if bad:
            what = " and the ".join(_STATE_NAMES[f] for f in bad)
            return (f"{self.release} corrupts the {what} of {self.model} at {pair}: "
                    f"{self.bad_bytes():,} bytes wrong")
        if self.heads_wrong or self.findings:
            return f"{self.release} misroutes {self.model} at {pair}: " + "; ".join(
                [*self.findings, *([f"{self.heads_wrong} KV heads wrong"] if self.heads_wrong else [])])
        return f"{self.release} moves {self.model}'s state right at {pair}"

    def lines(self) -> list[str]:
        """The sentence, then what the rank mapping does where the ratio is not a multiple, and
        what the writes would do if the requests went through."""
        out = [self.sentence(), *(f for f in self.findings if self.bad_bytes() or self.refusal or self.fails)]
        if self.fails and self.bad_bytes():
            out.append(f"were the state moved, {self.bad_bytes():,} bytes would be wrong")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"engine": "sglang", "release": self.release, "model": self.model, "p_tp": self.p_tp,
                "d_tp": self.d_tp, "backend": self.backend, "refusal": self.refusal, "right": self.right,
                "ssm_layers": self.ssm_layers, "bytes_wrong": self.bad_bytes(),
                "outcomes": [o.to_dict() for o in self.outcomes], "findings": list(self.findings),
                "kv_heads_wrong": self.heads_wrong, "fails": self.fails,
                "sentence": self.sentence()}


def kv_heads_wrong(model: ModelSpec, p_tp: int, d_tp: int) -> int:
    """Attention KV heads of all decode ranks that SGLang's head slices fill with another head
    or leave unwritten (one layer, one token)."""
    if model.num_kv_heads is None or p_tp == d_tp or model.mla:   # MLA: whole latent pages, every rank's
        return 0
    wrong = 0
    for d in range(d_tp):
        mine = kv_head_shard(model, d_tp, d)
        assert mine is not None
        got: dict[int, set[int]] = {}
        for p in writers(p_tp, d_tp, d):
            theirs = kv_head_shard(model, p_tp, p)
            assert theirs is not None
            s = head_slice(src_tp=p_tp, dst_tp=d_tp, src_rank=p, dst_rank=d, kv_heads=model.num_kv_heads)
            for i in range(s.count):
                got.setdefault(mine.start + s.dst_start + i, set()).add(theirs.start + s.src_start + i)
        wrong += sum(got.get(head, set()) != {head} for head in range(mine.start, mine.end))
        wrong += sum(1 for h in got if not mine.start <= h < mine.end)
    return wrong


def verdict(model: ModelSpec, p_tp: int, d_tp: int, *, backend: str = NIXL,
            p_env: Mapping[str, str] | None = None, d_env: Mapping[str, str] | None = None,
            prefill: Server | None = None, decode: Server | None = None,
            release: Release = SGLANG_0_5_23) -> Verdict:
    """SGLang's outcome for ``model`` from P TP ``p_tp`` to D TP ``d_tp`` over ``backend``; each
    side's environment (``p_env``, ``d_env``) may set SGLang's state dtype variables."""
    if backend not in release.backends:
        raise UserError(f"unknown transfer backend '{backend}'; choose one of: {', '.join(release.backends)}")
    spec = sglang_model(model, d_env, release)
    p_side, d_side = check_side(sglang_model(model, p_env, release), p_tp, release), check_side(spec, d_tp, release)
    said = refusals(prefill or Server(p_tp, **server_flags(spec)), decode or Server(d_tp), backend, release)
    findings = tuple(rank_findings(p_tp, d_tp).lines(p_tp))
    refusal = said[0].message if said else None
    try:
        writes = () if said else sglang_writes(p_side, d_side, backend, release)
    except UserError as refused:
        refusal = str(refused).removeprefix("SGLang: ")
    if refusal is not None:
        return Verdict(release.label, model.name, p_tp, d_tp, backend, refusal, spec.ssm_layers, (), findings, 0)
    return Verdict(release.label, model.name, p_tp, d_tp, backend, None, spec.ssm_layers,
                   compare(writes, p_side, d_side), findings, kv_heads_wrong(spec, p_tp, d_tp),
                   request_failure(p_tp, d_tp))


def request_failure(p_tp: int, d_tp: int) -> str | None:
    """Why SGLang's bootstrap fails every request where one TP size does not divide the other
    (``CommonKVBootstrapServer._handle_route_get``'s 404, or the bootstrap timeout), else None."""
    found = rank_findings(p_tp, d_tp)
    if found.missing:
        d, p = found.missing[0]
        return (f"decode rank {d} asks the bootstrap server for prefill rank {p}, which does not exist (HTTP 404), "
                f"and fails the request")
    if found.unread:
        return (f"prefill rank {found.unread[0]} waits for a decode rank that never comes and fails the request "
                f"after SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT (300 s)")
    return None
