"""Preflight for SGLang: each line read into the server SGLang 0.5.23 starts from it
(``launch_args.py``), what stops it, SGLang's own verdict on the pairing (``verdict.py``) and, when
anything fails, the smallest set of flag changes that the same verdict finds working."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Callable

from mambaxfer_cli.engines.sglang.bootstrap import Server
from mambaxfer_cli.engines.sglang.drafts import REFUSES, Draft, draft_for
from mambaxfer_cli.engines.sglang.entries import QSA_INDEXER_DTYPES, server_flags
from mambaxfer_cli.engines.sglang.families import merged as family_data
from mambaxfer_cli.engines.sglang.launch_args import CONV_DTYPE_VAR, FLAG, LaunchLine, flag_table, reparse
from mambaxfer_cli.engines.sglang.plan import plan
from mambaxfer_cli.engines.sglang.release import BACKENDS, NIXL, SGLANG_0_5_23, Release
from mambaxfer_cli.engines.sglang.shapes import family_rule, sglang_model, tp_refusal
from mambaxfer_cli.engines.sglang.verdict import Verdict, verdict
from mambaxfer_cli.engines.sglang.writes import check_side
from mambaxfer_cli.errors import Refused, UserError, reworded
from mambaxfer_cli.planning.model import ModelSpec
from mambaxfer_cli.preflight.report import (
    DECODE, PREFILL, SIDE_NAME, Change, Field, Fix, applied, merged, nearest_first, respelling, taken_value,
    tp_moves, tried, unrecognized,
)
from mambaxfer_cli.preflight.report import Report as SharedReport
from mambaxfer_cli.readers.shell import UNKNOWN

ModelLoader = Callable[[str], ModelSpec]
ENGINE = "sglang"


@dataclass(frozen=True)
class Refusal:
    code: str
    message: str

    def to_dict(self) -> dict:
        return asdict(self)


# --- one server ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class SGLangServer:
    """One side's server as SGLang starts it from its line."""

    side: str
    line: LaunchLine
    model: ModelSpec                 # as mambaxfer reads the checkpoint
    state: ModelSpec | None          # as SGLang keeps its state (its dtypes); None: SGLang does not serve it
    not_served: str | None           # why SGLang does not serve the model
    release: Release = SGLANG_0_5_23
    draft: Draft | None = None       # the draft's KV pool (--speculative-algorithm)
    draft_refused: str | None = None  # SGLang's refusal of the speculative flags

    @property
    def tp(self) -> int:
        return self.line.attn_tp

    @property
    def forced_page_size(self) -> int | None:
        """The page size SGLang sets for the model whatever the line says (its family's ``PAGE_SIZES``)."""
        hook = family_data("PAGE_SIZES").get(self.model.family)
        return hook(self.model) if hook else None

    @property
    def page_size(self) -> int:
        """``--page-size``, else SGLang's default on CUDA (``_page_size_default``: 1), unless the family's."""
        return self.forced_page_size or (1 if self.line.page_size is None else self.line.page_size)

    def server(self) -> Server:
        return Server(tp=self.tp, pp=self.line.pp, page_size=self.page_size,
                      kv_cache_dtype=self.line.kv_cache_dtype, unified_memory=self.line.unified_memory,
                      **(server_flags(self.state, QSA_INDEXER_DTYPES[self.line.qsa_indexer_dtype]) if self.state
                         else {}))

    @property
    def unused_qsa_dtype(self) -> bool:
        """``--qsa-indexer-dtype`` set for a model without the compressed QSA indexer (SGLang does not start)."""
        return self.line.qsa_indexer_dtype != "auto" and not self.server().qsa_state

    def state_bytes(self) -> str | None:
        """Conv + temporal bytes of one slot of one layer on one rank."""
        if self.state is None or tp_refusal(self.state, self.tp, self.release) is not None:
            return None
        try:
            layout = check_side(self.state, self.tp, self.release).layouts()[0]
        except UserError:
            return None
        return f"{layout.conv_bytes} + {layout.ssm_bytes}"

    def summary(self) -> dict:
        s = self.state
        return {"command": self.line.command(), "model": self.line.model, "launcher": self.line.launcher,
                "disaggregation_mode": self.line.mode, "tp": self.line.tp, "attention_tp": self.tp,
                "pp": self.line.pp, "page_size": self.page_size, "requested_page_size": self.line.page_size,
                "kv_cache_dtype": self.line.kv_cache_dtype, "transfer_backend": self.line.transfer_backend,
                "bootstrap_port": self.line.bootstrap_port,
                "conv_dtype": s.conv_dtype if s else None, "ssm_dtype": s.ssm_dtype if s else None,
                "conv_dtype_from": _origin(s.origin.get("conv_dtype")) if s else None,
                "ssm_dtype_from": ("--mamba-ssm-dtype" if self.line.mamba_ssm_dtype is not None else
                                   _origin(s.origin.get("ssm_dtype"))) if s else None,
                "mamba_radix_cache_strategy": self.line.radix_strategy,
                "radix_cache": not self.line.disable_radix_cache,
                "environment": dict(self.line.env), "ignored_flags": list(self.line.ignored),
                "unknown_flags": list(self.line.unknown)}


def _origin(said: str | None) -> str | None:
    """Where a state dtype came from, said short: default, env VAR, config key K."""
    return "default" if said is None or said.startswith("SGLang default") else said


def build_server(side: str, line: LaunchLine, load: ModelLoader, release: Release = SGLANG_0_5_23) -> SGLangServer:
    """The server SGLang starts from ``line``; ``load(name)`` resolves the model as ``--model`` does."""
    where = line.origin or f"--{side}"
    if line.transfer_backend not in BACKENDS:
        raise UserError(f"{where}: --disaggregation-transfer-backend {line.transfer_backend}: mambaxfer answers "
                        f"for SGLang's {' and '.join(BACKENDS)} backends")
    try:
        model = load(line.model)
    except UserError as exc:
        raise reworded(exc, f"{where}: {exc}") from None
    try:
        family_rule(model, release)
    except UserError as exc:
        return SGLangServer(side, line, model, None, str(exc), release)
    try:
        draft, refused = draft_for(model, line.speculative_algorithm, line.draft_model), None
    except Refused as exc:
        draft, refused = None, str(exc)
    except UserError as exc:
        raise reworded(exc, f"{where}: {exc}") from None
    return SGLangServer(side, line, model, sglang_model(model, line.state_env, release), None, release, draft,
                        refused)


# --- the verdict ---------------------------------------------------------------------------------

def startup_refusals(e: SGLangServer) -> list[Refusal]:
    """What stops one server before it meets the other, in SGLang's order: its parser, the model,
    the TP size, the Mamba cache settings, then its disaggregation mode."""
    name, line, rel = SIDE_NAME[e.side], e.line, e.release
    start = f"{rel.label} does not start the {e.side} server"
    if line.unknown:
        return [Refusal("unrecognized-arguments",
                        f"{start}: its parser exits with {unrecognized(line.unknown, flag_table(rel.version))}")]
    if e.state is None:
        return [Refusal("model", f"{start}: {e.not_served}")]
    refused = tp_refusal(e.state, e.tp, rel)
    if refused:
        return [Refusal("parallel-config", f"{start} at TP {e.tp}: {refused}")]
    if e.draft_refused:
        return [Refusal("speculative", f"{start}: {e.draft_refused.removeprefix(REFUSES)}")]
    out = []
    if not line.disable_radix_cache and line.radix_strategy == "extra_buffer_lazy" and line.mode != "null":
        # mamba_hook.py validate_mamba_extra_buffer (an assert)
        out.append(Refusal("mamba-radix-cache", f"{start}: extra_buffer_lazy unsupported under PD disaggregation; "
                                                f"use --mamba-radix-cache-strategy extra_buffer."))
    if not line.disable_radix_cache and line.radix_strategy == "no_buffer" and e.page_size != 1:
        # mamba_hook.py validate_mamba_no_buffer (an assert)
        out.append(Refusal("mamba-radix-cache", f"{start}: no_buffer only supports page_size=1."))
    if e.unused_qsa_dtype:
        out.append(Refusal("qsa-indexer-dtype", f"{start}: " + rel.message("qsa_dtype_unused",
                                                                         dtype=line.qsa_indexer_dtype)))
    if line.mode != e.side:
        what = ("serves requests on its own (SGLang's default, --disaggregation-mode null)" if line.mode == "null"
                else f"is a {line.mode} server (--disaggregation-mode {line.mode})")
        verb = "sends" if e.side == PREFILL else "receives"
        out.append(Refusal("disaggregation-mode", f"{name} {what}: it never {verb} state as the {e.side} side"))
    return out


@dataclass(frozen=True)
class Assessment:
    prefill: SGLangServer
    decode: SGLangServer
    refusals: tuple[Refusal, ...]        # before the servers meet, then SGLang's bootstrap
    verdict: Verdict | None              # None where a server does not start

    @property
    def release(self) -> Release:
        return self.prefill.release

    @property
    def refused(self) -> bool:
        return bool(self.refusals)

    @property
    def fails(self) -> bool:
        return not self.refused and self.verdict is not None and self.verdict.fails is not None

    @property
    def corrupt(self) -> bool:
        return not self.refused and not self.fails and self.verdict is not None and not self.verdict.right

    @property
    def outcome(self) -> str:
        return "refused" if self.refused else "fails" if self.fails else "corrupt" if self.corrupt else "works"

    @property
    def works(self) -> bool:
        return self.outcome == "works"

    @property
    def fields(self) -> list[Field]:
        return compared_fields(self.prefill, self.decode) + unchecked_fields(self.prefill, self.decode)


def assess(p: SGLangServer, d: SGLangServer) -> Assessment:
    refusals = startup_refusals(p) + startup_refusals(d)
    if any(r.code in ("unrecognized-arguments", "model", "parallel-config", "speculative") for r in refusals):
        return Assessment(p, d, tuple(refusals), None)
    if p.line.transfer_backend != d.line.transfer_backend:
        refusals.append(Refusal("transfer-backend", (
            f"P's --disaggregation-transfer-backend is {p.line.transfer_backend} and D's "
            f"{d.line.transfer_backend}: the two servers' transfer engines do not talk to each other")))
    assert p.state is not None and d.state is not None
    found = verdict(p.model, p.tp, d.tp, backend=p.line.transfer_backend, p_env=p.line.state_env,
                    d_env=d.line.state_env, prefill=p.server(), decode=d.server(), release=p.release)
    if found.refusal is not None:
        refusals.append(Refusal("bootstrap", found.refusal))
    elif _geometry(p.state) != _geometry(d.state):
        found = other_model(found, p.state, d.state)
    elif p.draft != d.draft or p.draft is not None:
        found = with_drafts(found, p, d)
    return Assessment(p, d, tuple(refusals), found)


def with_drafts(found: Verdict, p: SGLangServer, d: SGLangServer) -> Verdict:
    """The verdict with the draft KV pools both sides append: the plan's rule where they match; one
    of P's that D lacks fails each request on Mooncake (``build_transfer_entry_pairs``)."""
    if p.draft == d.draft:
        try:
            plan(p.model, p.tp, d.tp, backend=p.line.transfer_backend, draft=p.draft)
        except Refused as exc:
            return replace(found, fails=str(exc))
        return found
    if p.draft is not None and d.draft is None and p.line.transfer_backend != NIXL:
        return replace(found, fails=f"P appends its draft's KV ({p.draft.source}) and D has none: \"Decode peer is "
                                    f"missing a transfer entry for model layer {p.draft.band}\" "
                                    f"(build_transfer_entry_pairs)")
    raise UserError(f"P's and D's speculative settings build different draft KV pools ({_drafted(p)}; "
                    f"{_drafted(d)}); mambaxfer's preflight answers where they match")


def _drafted(e: SGLangServer) -> str:
    d = e.draft
    return f"{e.side}: none" if d is None else f"{e.side}: {d.layers} × {d.num_kv_heads} heads of {d.head_size}"


def _geometry(model: ModelSpec) -> tuple:
    """What makes two servers' state and KV the same model's."""
    return (model.family, model.variant, tuple(sorted(model.params.items())), model.layers, model.ssm_layer_ids,
            model.conv_kernel, model.num_kv_heads, model.head_size)


def other_model(found: Verdict, p: ModelSpec, d: ModelSpec) -> Verdict:
    """The verdict on two servers of different models: the request fails where D lacks an entry for
    one of P's layers, else P's state lands in slots of D's model's."""
    missing = [i for i in p.ssm_layer_ids if i not in d.ssm_layer_ids]
    said = (f"P serves {p.name} and D {d.name}, and SGLang's bootstrap compares no model: P pairs its state "
            f"entries with D's by model layer id (build_transfer_entry_pairs, disaggregation/utils.py)")
    if missing:
        return replace(found, fails=f"{said}, and D has none for P's layer {missing[0]}: \"Decode peer is missing "
                                    f"a transfer entry for model layer {missing[0]}\"")
    return replace(found, findings=(*found.findings, f"{said} and writes {p.name}'s state into slots of "
                                                     f"{d.name}'s: D decodes from another model's state"))


# --- what is compared ----------------------------------------------------------------------------

def compared_fields(p: SGLangServer, d: SGLangServer) -> list[Field]:
    """What SGLang's bootstrap compares (page size, KV-cache dtype, PP sizes) and what the two
    servers must share to meet at all (mode, backend, TP sizes that divide)."""
    big, small = max(p.tp, d.tp), min(p.tp, d.tp)
    ps, ds = p.server(), d.server()
    return [Field("disaggregation mode", p.line.mode, d.line.mode, True,
                  p.line.mode == PREFILL and d.line.mode == DECODE),
            Field("transfer backend", p.line.transfer_backend, d.line.transfer_backend, True),
            Field("page size", p.page_size, d.page_size, True),
            Field("KV-cache dtype", p.line.kv_cache_dtype, d.line.kv_cache_dtype, True),
            Field("PP size (D's equal or 1)", p.line.pp, d.line.pp, True, d.line.pp in (p.line.pp, 1)),
            Field("attention TP (one divides the other)", p.tp, d.tp, True, big % small == 0),
            *([Field("QSA compressed keys (--qsa-indexer-dtype)", p.line.qsa_indexer_dtype, d.line.qsa_indexer_dtype,
                     True, ps.qsa_page_bytes == ds.qsa_page_bytes)] if ps.qsa_state else [])]


def unchecked_fields(p: SGLangServer, d: SGLangServer) -> list[Field]:
    """What SGLang never compares: a mismatch is accepted and moves the bytes as they are."""
    rows = [Field("model", p.line.model, d.line.model, False)]
    if p.state is not None and d.state is not None:
        rows += [Field("conv dtype", p.state.conv_dtype, d.state.conv_dtype, False),
                 Field("SSM (temporal) dtype", p.state.ssm_dtype, d.state.ssm_dtype, False)]
    pb, db = p.state_bytes(), d.state_bytes()
    if pb is not None and db is not None:
        rows.append(Field("state bytes per slot, layer, rank", pb, db, False, True))
    if p.draft is not None or d.draft is not None:
        rows.append(Field("draft KV bytes per token, layer, rank", _draft_bytes(p), _draft_bytes(d), False,
                          p.draft == d.draft))
    return rows


def _draft_bytes(e: SGLangServer) -> str:
    if e.draft is None or e.state is None:
        return "no draft"
    return f"{e.draft.side(e.state, e.tp, 1).token_bytes} ({e.draft.layers} layer{'s' * (e.draft.layers > 1)})"


# --- fixes ---------------------------------------------------------------------------------------

FLAG_KEY = {flag: key for key, flag in FLAG.items()}


def _startup_changes(p: SGLangServer, d: SGLangServer, respell: bool = True) -> list[Change]:
    """Each server started as its side: unknown flags respelled (``respell``) or dropped, its mode,
    a Mamba cache strategy that starts under PD."""
    out: list[Change] = []
    for e in (p, d):
        table = flag_table(e.release.version)
        for flag in e.line.unknown:
            if not flag.startswith("-"):
                out.append(Change(e.side, flag, None, None, "an argument SGLang's parser does not take"))
                continue
            value = taken_value(e.line.words, e.line.occurrences[UNKNOWN + flag][0])     # unrecognized noted it
            rename = respelling(e.side, flag, value, table, "SGLang's parser") if respell else None
            out.append(rename or Change(e.side, flag, value, None, "SGLang's parser does not know it"))
        if e.line.mode != e.side:
            out.append(Change(e.side, FLAG["mode"], e.line.mode, e.side, f"the {e.side} side of the pair"))
        if e.line.radix_strategy == "extra_buffer_lazy" and e.line.mode != "null" or \
                e.line.radix_strategy == "no_buffer" and e.page_size != 1:
            out.append(Change(e.side, FLAG["radix_strategy"], e.line.radix_strategy, None,
                              "SGLang's own choice (auto) starts with this page size under PD"))
        if e.unused_qsa_dtype:
            out.append(Change(e.side, FLAG["qsa_indexer_dtype"], e.line.qsa_indexer_dtype, None,
                              "the model has no compressed QSA indexer"))
    return out


def _align(p: SGLangServer, d: SGLangServer) -> list[Change]:
    """D aligned to P where SGLang's bootstrap compares or its writes move bytes as they are."""
    pl, dl, ps, ds = p.line, d.line, p.server(), d.server()
    compared, unchecked = "as P's: SGLang's bootstrap compares it", "as P's: SGLang does not compare the {} dtype"
    rows = [(FLAG["transfer_backend"], pl.transfer_backend != dl.transfer_backend, dl.transfer_backend,
             pl.transfer_backend, "as P's"),
            (FLAG["page_size"], p.page_size != d.page_size, None if dl.page_size is None else str(dl.page_size),
             str(p.page_size), compared),
            (FLAG["kv_cache_dtype"], pl.kv_cache_dtype != dl.kv_cache_dtype, dl.kv_cache_dtype, pl.kv_cache_dtype,
             compared),
            (FLAG["pp"], dl.pp not in (pl.pp, 1), str(dl.pp), str(pl.pp), "as P's: D's PP size must be P's or 1"),
            (FLAG["qsa_indexer_dtype"], ps.qsa_page_bytes != ds.qsa_page_bytes, dl.qsa_indexer_dtype,
             pl.qsa_indexer_dtype, "as P's: SGLang's senders pair the compressed QSA keys item for item")]
    if p.state is not None and d.state is not None:
        rows += [(FLAG["mamba_ssm_dtype"], p.state.ssm_dtype != d.state.ssm_dtype, dl.mamba_ssm_dtype,
                  p.state.ssm_dtype, unchecked.format("SSM state")),
                 (f"{CONV_DTYPE_VAR}=", p.state.conv_dtype != d.state.conv_dtype, dl.state_env.get(CONV_DTYPE_VAR),
                  p.state.conv_dtype, unchecked.format("conv state"))]
    if p.draft != d.draft:
        rows += [(FLAG[key], getattr(pl, key) != getattr(dl, key), getattr(dl, key), getattr(pl, key),
                  "as P's: D receives P's draft KV") for key in ("speculative_algorithm", "draft_model")]
    return [Change(DECODE, flag, old, new, why) for flag, differs, old, new, why in rows if differs]


def find_fix(first: Assessment, load: ModelLoader) -> Fix[LaunchLine, Assessment] | None:
    """The smallest set of changes (each server started as its side, D aligned to P, then the
    same TP on both) that the verdict, re-run on the corrected lines, finds working."""
    return tried((first.prefill.line, first.decode.line), lambda line, c: applied(line, c, reparse, FLAG_KEY),
                 lambda side, line: build_server(side, line, load, first.release), assess,
                 lambda respell: _startup_changes(first.prefill, first.decode, respell=respell), _tp_moves, _with_flags)


def _tp_moves(a: Assessment) -> list[list[Change]]:
    """Each side whose TP size SGLang does not serve the model at moved to a size it does, nearest
    first (``tp_moves``); only where the attention TP is the TP size (no attention DP or CP)."""
    options: list[list[Change]] = []
    for e in (a.prefill, a.decode):
        state = e.state
        refused = None if state is None else tp_refusal(state, e.tp, e.release)
        if state is None or refused is None or e.line.attn_dp_size != 1 or e.line.attn_cp != 1:
            options.append([])
            continue
        sizes = [t for t in range(1, 2 * e.tp + 1) if tp_refusal(state, t, e.release) is None]
        options.append(tp_moves(e.side, FLAG["tp"], e.tp, sizes, refused))
    return nearest_first(options)


def _with_flags(prior: list[Change], now: Assessment, run) -> Fix[LaunchLine, Assessment] | None:
    """``prior``, D aligned to P, and as a last resort the same TP on both, verified."""
    base = prior + _align(now.prefill, now.decode)
    candidates = [base]
    pl, dl = now.prefill.line, now.decode.line
    plain = all(x.attn_dp_size == 1 and x.attn_cp == 1 for x in (pl, dl))
    if now.prefill.tp != now.decode.tp and plain:
        candidates.append(base + [Change(PREFILL, FLAG["tp"], str(pl.tp), str(dl.tp),
                                         "SGLang's writes are right only when P and D shard alike here")])
    for changes in candidates:
        if not changes:
            continue
        try:
            p_line, d_line, after = run(changes)
        except UserError:
            continue
        if after.works:
            return Fix(tuple(merged(changes, flag_table().get, "SGLang's parser")), p_line, d_line, after)
    return None


# --- the report ----------------------------------------------------------------------------------

class Report(SharedReport[LaunchLine, Assessment]):
    def headline(self) -> str:
        a = self.assessment
        label = a.release.label
        if a.refused:
            r = a.refusals[0]
            if r.code in ("unrecognized-arguments", "model", "parallel-config", "mamba-radix-cache"):
                return f"REFUSED: {r.message}"
            return f"REFUSED: {label} would not run this pairing ({r.code}: {r.message})"
        assert a.verdict is not None
        v = a.verdict
        if a.fails:
            return f"FAILS: {label} starts both servers, but every request fails: {v.fails}"
        if a.corrupt:
            return f"CORRUPT: {label} accepts this pairing, but {v.sentence().removeprefix(label + ' ')}"
        verified = sum(o.item_bytes for o in v.outcomes) * v.ssm_layers
        return (f"WORKS: {label} accepts this pairing and its writes move the right bytes ({verified:,} bytes of "
                f"state per request verified)")

    def to_dict(self) -> dict:
        a = self.assessment
        own = {"release": a.release.label, "accepts": not a.refused, "refusals": [r.to_dict() for r in a.refusals],
               "verdict": None if a.verdict is None else a.verdict.to_dict()}
        return self.document({"engine": ENGINE, "release": a.release.version, "verdict": self.verdict},
                             a.prefill.summary(), a.decode.summary(), {"sglang": own})


def preflight(prefill: LaunchLine, decode: LaunchLine, load: ModelLoader,
              release: Release = SGLANG_0_5_23) -> Report:
    """The verdict on two SGLang server lines."""
    p = build_server(PREFILL, prefill, load, release)
    d = build_server(DECODE, decode, load, release)
    first = assess(p, d)
    fix = None if first.works else find_fix(first, load)
    warnings = []
    for e in (p, d):
        name = SIDE_NAME[e.side]
        if e.line.page_size is None and not e.line.unknown and not e.forced_page_size:
            warnings.append(f"{name}: no --page-size: SGLang's default on CUDA, 1, assumed")
        if e.line.attn_dp_size > 1 or e.line.attn_cp > 1:
            warnings.append(f"{name}: attention DP/CP: the state and rank mapping follow the attention TP size "
                            f"{e.tp} (TP {e.line.tp} / attention DP {e.line.attn_dp_size} / CP {e.line.attn_cp})")
        if e.line.qsa_indexer_dtype == "fp8_e4m3":     # the model's override checks the platform
            warnings.append(f"{name}: --qsa-indexer-dtype fp8_e4m3: SGLang starts only on a CUDA SM90 or SM100 GPU "
                            f"(\"--qsa-indexer-dtype fp8_e4m3 requires a CUDA SM90/SM100 GPU\")")
        warnings += [f"{name}: {n}" for n in e.line.notes]
    if p.line.mode == PREFILL and d.line.mode == DECODE:
        warnings.append(f"the router gives D P's --disaggregation-bootstrap-port ({p.line.bootstrap_port})")
    return Report(first, fix, tuple(warnings))

