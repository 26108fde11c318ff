"""The toy's command bodies: the option groups in, a report out."""

from __future__ import annotations

import importlib.util
import secrets
from typing import TYPE_CHECKING, Any

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.limits import check_bounds
from toy_engine.check import prove
from toy_engine.plan import plan
from toy_engine.views import CheckReport, PlanReport, RunReport

if TYPE_CHECKING:
    from mambaxfer_cli.cli.options import ModelArgs, PairArgs, RunArgs
    from mambaxfer_cli.render.report import Report

MAX_TP = 4


def plan_report(model: ModelArgs, pair: PairArgs, d_rank: int | None, show: str | None) -> Report:
    if show is not None:
        raise UserError("--show: the toy shows its writes, nothing more")
    planned = plan(model.load(), pair.p_tp or 0, pair.d_tp or 0).to_dict()
    if d_rank is not None:
        planned["writes"] = [w for w in planned["writes"] if w["d_rank"] == d_rank]
    return PlanReport(planned)


def check_report(model: ModelArgs, pairs: str | None, max_tp: int | None) -> Report:
    from mambaxfer_cli.proof.verdicts import parse_pairs

    top = max_tp or MAX_TP
    pairings = ([(p.p_tp, p.d_tp) for p in parse_pairs(pairs)] if pairs
                else [(p, d) for p in range(1, top + 1) for d in range(1, top + 1)])
    for p_tp, d_tp in pairings:
        check_bounds(p_tp=p_tp, d_tp=d_tp)
    models: list[dict[str, Any]] = []
    for name in model.names():
        spec = model.load(name)
        models.append({"model": spec.name, "pairings": [prove(plan(spec, p, d)).to_dict() for p, d in pairings]})
    verified = all(p["verified"] for m in models for p in m["pairings"])
    return CheckReport({"engine": "toy", "verified": verified, "models": models})


def run_report(model: ModelArgs, pair: PairArgs, run: RunArgs, rounds: int) -> Report:
    """execute (``rounds``: 1) and bench (``--iters``): the transfer between real rank processes."""
    from mambaxfer_cli.cli.outcome import one_line_when_the_run_fails
    from mambaxfer_cli.execute.tasks import RunSettings, cut_layers
    from mambaxfer_cli.limits import finite_seconds
    from mambaxfer_cli.render.run_view import ProgressView
    from toy_engine.transfer import run as transfer

    check_bounds(p_tp=pair.p_tp or 0, d_tp=pair.d_tp or 0, layers=run.layers, iters=rounds)
    finite_seconds("--timeout", run.timeout)
    if (run.device or "cpu").strip().lower() != "cpu":
        raise UserError(f"--device {run.device}: the toy moves DRAM only (--device cpu)")
    if model.model is None or pair.p_tp is None or pair.d_tp is None:
        raise UserError("the toy's transfer needs --model, --p-tp and --d-tp")
    if importlib.util.find_spec("nixl") is None:
        raise UserError("NIXL is not installed; the toy's transfer needs it")
    planned = plan(cut_layers(model.load(), run.layers), pair.p_tp, pair.d_tp)
    settings = RunSettings(secrets.token_hex(4), "cpu", 0, "127.0.0.1", 0, rounds)
    with one_line_when_the_run_fails(), ProgressView(f"toy: P TP {pair.p_tp} → D TP {pair.d_tp}") as view:
        document = transfer(planned, settings, rounds, run.timeout, view.update)
    return RunReport(document)
