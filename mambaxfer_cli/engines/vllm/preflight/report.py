"""vLLM's preflight report: the verdict, the fields compared, the byte check and the fix, as one
document (``engines/vllm/views/preflight.py`` draws it)."""

from __future__ import annotations

from typing import Any

from mambaxfer_cli.engines.vllm import drafts
from mambaxfer_cli.engines.vllm.engine import Engines
from mambaxfer_cli.engines.vllm.geometry import Geometry
from mambaxfer_cli.engines.vllm.handshake import NOT_CHECKED
from mambaxfer_cli.engines.vllm.proof.check import PairingResult
from mambaxfer_cli.engines.vllm.releases import NAMES
from mambaxfer_cli.engines.vllm.serve_args import ServeLine
from mambaxfer_cli.engines.vllm.preflight.served import ModelLoader, ServedEngine, build_engine, pushes
from mambaxfer_cli.preflight.report import DECODE, PREFILL, SIDE_NAME, Report as SharedReport
from mambaxfer_cli.engines.vllm.preflight.refusals import Assessment, assess, hash_warnings, replayssm_of, simulation_of
from mambaxfer_cli.engines.vllm.preflight.fix import find_fix
from mambaxfer_cli.engines.vllm.startup import STARTUP_CODES


class Report(SharedReport[ServeLine, Assessment]):
    def headline(self) -> str:
        a = self.assessment
        releases = a.releases
        if a.refused and a.refusals[0].code in STARTUP_CODES:      # startup: the engine's first step
            return f"REFUSED: {a.refusals[0].message}"
        if a.refused:
            return f"REFUSED: {releases} would not run this pairing ({a.refusals[0].code}: {a.refusals[0].message})"
        if a.fails:     # NIXL refuses every READ (the state sizes differ): which field, which sizes
            bad = a.length_mismatches[0]
            differs = [f for f in a.unchecked_mismatches if "bytes" not in f.name]
            cause = (f"P and D differ in {differs[0].name} (P {differs[0].prefill}, D {differs[0].decode}), which "
                     f"vLLM's handshake does not compare: " if differs else "")
            return (f"FAILS: {cause}{releases} accepts this pairing, but every transfer fails: each P rank's SSM "
                    f"temporal state is {bad.remote_bytes} bytes and D reads it into a {bad.local_bytes}-byte slice; "
                    f"NIXL refuses descriptors of unequal length, so vLLM ends each request in error "
                    f"(kv_load_failure_policy 'fail', its default) or prefills it again on D ('recompute')")
        if a.byte_check is None:
            return f"UNCHECKED: {a.byte_check_skipped}"
        sim = simulation_of(a.byte_check)
        if a.corrupt and sim.ok and a.reinterpreted:
            what, pv, dv = a.reinterpreted[0]
            unchecked = ("the compatibility hash that would refuse this pairing is skipped (enforce_handshake_"
                         "compat false)" if a.let_through else "vLLM's handshake does not compare it")
            return (f"CORRUPT: P keeps its {what} in {pv}, D in {dv}, and {unchecked}: every byte lands where D "
                    f"expects it, but D reads P's {pv} values as {dv}")
        if a.corrupt and a.indexer_keys_differ and sim.ok:
            p, d = (e.model.ple_qsa.indexer_kv_dtype for e in (a.prefill, a.decode) if e.model.ple_qsa)
            return (f"CORRUPT: P keeps its QSA compressed keys in {p}, D in {d} (--attention-config "
                    f"indexer_kv_dtype), which vLLM's handshake does not compare: {releases} accepts the pairing and "
                    f"D reads P's key pages as its own")
        if a.corrupt and a.unchecked_mismatches:
            f = a.unchecked_mismatches[0]
            return (f"CORRUPT: P and D differ in {f.name} (P {f.prefill}, D {f.decode}), which vLLM's handshake "
                    f"does not compare: {releases} accepts the pairing and D reads P's bytes with its own "
                    f"offsets ({sim.wrong_bytes} wrong bytes)")
        if a.corrupt and a.plan is not None and any(w.code == "vllm-replicated-groups" for w in a.plan.warnings):
            groups = a.decode.model.params.get("n_groups")
            return (f"CORRUPT: {releases} accepts this pairing, but its reads corrupt the SSM state: its offsets "
                    f"assume every region is evenly sharded across ranks, while this model's B/C groups "
                    f"(n_groups={groups}) are replicated on the D ranks ({sim.wrong_bytes} "
                    f"wrong bytes)")
        if a.corrupt:
            lines = a.byte_check.explanation()
            return (f"CORRUPT: {releases} accepts this pairing, but D's reads land wrong bytes "
                    f"({sim.wrong_bytes} bytes; {lines[0] if lines else 'see below'})")
        return (f"WORKS: {releases} accepts this pairing and its reads move the right bytes "
                f"({sim.bytes_verified} bytes verified)")

    def to_dict(self) -> dict:
        a = self.assessment

        def engine(e: ServedEngine, g: Geometry | None) -> dict:
            return {"command": e.line.command(), **e.summary(), "geometry": g.to_dict() if g else None,
                    "ignored_flags": list(e.line.ignored), "unknown_flags": list(e.line.unknown)}

        plan, check = a.plan, a.byte_check
        head = {**Engines(a.prefill.flags, a.decode.flags).to_dict(),
                "verdict": self.verdict if a.byte_check or a.refused or a.fails else "unchecked"}
        own = {"vllm": {"releases": a.releases, "accepts": not a.refused, "refusals": [r.to_dict() for r in a.refusals],
                        "suggested_block_size": a.suggested_block_size, "not_checked": list(NOT_CHECKED)},
               "byte_check": None if check is None else _byte_check(check),
               "byte_check_skipped": a.byte_check_skipped or None,
               "unchecked_mismatches": [f"{f.name}: P {f.prefill}, D {f.decode}" for f in a.unchecked_mismatches],
               "plan_warnings": [w.to_dict() for w in plan.warnings] if plan else []}
        p_geometry, d_geometry = (side.geometry for side in plan.served) if plan else (None, None)
        return self.document(head, engine(a.prefill, p_geometry), engine(a.decode, d_geometry), own)


def preflight(prefill: ServeLine, decode: ServeLine, load: ModelLoader, engines: Engines = Engines()) -> Report:
    """The verdict on two serve lines; ``engines``: each side's release and GPU (and what the
    lines leave unsaid)."""
    p = build_engine(PREFILL, prefill, load, engines.prefill)
    d = build_engine(DECODE, decode, load, engines.decode)
    first = assess(p, d)
    fix = None if first.works else find_fix(first, load)
    warnings = []
    for e in (p, d):
        name = SIDE_NAME[e.side]
        if e.line.unknown:
            warnings.append(f"{name}: no vLLM release mambaxfer knows ({', '.join(NAMES)}) has "
                            f"{', '.join(e.line.unknown)}: vllm serve exits with 'unrecognized arguments'")
        warnings += [f"{name}: {flag} is known to vLLM {', '.join(releases)} only, and this engine runs vLLM "
                     f"{e.release.name}: vllm serve exits with 'unrecognized arguments'"
                     for flag, releases in e.line.release_only if e.release.name not in releases]
        if (e.line.attention_backend is None and e.model.has_attention and e.flags.attention_backend is None
                and e.model.kpool_indexer is None):     # GLM-5-Next: vLLM's sparse pick, shown in the table
            warnings.append(f"{name}: no --attention-backend: {e.attention_backend} assumed (vLLM's pick on "
                            f"{e.flags.gpu.name})")
        if e.line.kv_role == "kv_both":
            warnings.append(f"{name}: kv_role kv_both is deprecated for NIXL")
        if e.line.use_replayssm and replayssm_of(e).recoverssm:
            warnings.append(f"{name}: --use-replayssm with speculative tokens on a KDA model is RecoverSSM "
                            f"(validate_mamba_cached_kernel): its verify records live outside the KV cache, the page "
                            f"is the stock one and the connector moves it")
        if e.line.num_speculative_tokens and drafts.drafts(e.line.speculative) and not e.model.draft_layers:
            drafter = drafts.drafter_of(e.line.speculative)
            why = drafts.unplanned(e.model, drafter) if drafter else ""
            warnings.append(f"{name}: --speculative-config method {drafts.method_name(e.line.speculative)}: "
                            f"{drafts.RULE}; {why}mambaxfer checks the target model's layers only")
        warnings += [f"{name}: {n}" for n in e.line.notes]
    warnings += hash_warnings(p, d, first.plan)
    if pushes(p, d):
        warnings.append("push mode (NixlPushConnector): vLLM's handshake rules are applied with P as the local "
                        "side, as its push worker does; the byte-level check simulates D's pull reads "
                        "(mambaxfer does not model push WRITEs)")
    if first.plan is not None and not first.refused and first.plan.verdict.needs_remote_num_tokens and not pushes(p, d):
        warnings.append(f"{first.releases} pairs P's and D's blocks from the request's last token here: the proxy "
                        f"must forward remote_num_tokens in kv_transfer_params, or D declines the reads")
    return Report(first, fix, tuple(warnings))


def _byte_check(check: PairingResult) -> dict[str, Any]:
    sim = simulation_of(check)
    return {"verdict": "pass" if sim.ok else "fail", "bytes_moved": check.bytes, "bytes_verified": sim.bytes_verified,
            "wrong_bytes": sim.wrong_bytes, "explanation": check.explanation(limit=1000) if not sim.ok else []}
