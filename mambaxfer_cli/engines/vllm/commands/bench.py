"""vLLM's bench, in the two steps ``bench`` and ``bench --engine vllm,sglang`` share: planned (every
refusal said before any rank starts), then measured."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mambaxfer_cli.cli.options import EngineArgs, ModelArgs, PairArgs, RequestArgs, RunArgs, Semantics, need_nixl
from mambaxfer_cli.cli.outcome import said
from mambaxfer_cli.engines.vllm.commands import served
from mambaxfer_cli.engines.vllm.options import build
from mambaxfer_cli.engines.vllm.views.execute import moved
from mambaxfer_cli.errors import UserError, reworded
from mambaxfer_cli.exits import EXIT_OK, EXIT_WRONG
from mambaxfer_cli.render.report import Report, chart_notes, check_chart

if TYPE_CHECKING:
    from mambaxfer_cli.render.bench_view import BenchProgress


def _sizes(text: str) -> list[int]:
    from mambaxfer_cli.limits import check_bounds

    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        sizes = []
    if not sizes:
        raise UserError(f"--request-blocks '{text[:40]}': give block counts like '1,4,16'")
    for size in sizes:
        check_bounds(request_blocks=size)
    return sizes


@dataclass(frozen=True)
class VllmBench:
    """vLLM's bench, planned (every refusal said) before any rank starts: per request size, the
    planned and the coalesced plan; the devices."""

    p_tp: int
    d_tp: int
    semantics: str
    sizes: list[int]
    plans: list[tuple[Any, Any]]
    devices: list[tuple[str, int]]

    @property
    def steps(self) -> int:
        return len(self.plans) * len(self.devices)

    def measure(self, run: RunArgs, view: BenchProgress) -> dict[str, Any]:
        """Run vLLM's bench; the ``mambaxfer.bench/v1`` document. A failed run raises RunFailure."""
        from mambaxfer_cli.engines.vllm.transfer.bench import bench_document, bench_point

        points = []
        for kind, gpus in self.devices:
            for n, (planned, coalesced) in zip(self.sizes, self.plans):
                view.start(f"{kind} {n} blocks/request")
                try:
                    points.append(bench_point(planned, coalesced, kind, gpus, run.iters, run.timeout, view.update))
                except UserError as exc:
                    raise reworded(exc, f"{kind}, --request-blocks {n}: {exc}") from None
                view.advance()
        first = self.plans[0][0]
        return {**bench_document(first, points, run.iters), **first.engines.to_dict()}


def prepare_vllm(model: ModelArgs, pair: PairArgs, engines: EngineArgs, request: RequestArgs, run: RunArgs,
                 sweep: str, chart: Path | None) -> VllmBench:
    """vLLM's bench planned: options checked, the plans made, the memory checked, NIXL found."""
    from mambaxfer_cli.limits import check_bounds, finite_seconds

    p_tp, d_tp = pair.p_tp or 0, pair.d_tp or 0
    check_bounds(p_tp=p_tp, d_tp=d_tp, layers=run.layers, iters=run.iters, seed=request.seed)
    finite_seconds("--timeout", run.timeout)
    sizes = _sizes(sweep)
    check_chart(chart)
    from mambaxfer_cli.engines.vllm.transfer.plan_source import plan_to_execute
    from mambaxfer_cli.execute.tasks import cut_layers
    from mambaxfer_cli.engines.vllm.transfer.tasks import check_fits

    built = build(engines)
    engine = built.decode
    spec = cut_layers(served(model, engines, built, built.release_names), run.layers)    # draft layers too
    semantics = request.reads(default=Semantics.vllm.value)
    plans = [tuple(plan_to_execute(spec, p_tp, d_tp, semantics=semantics, coalesce=c, blocks=None,
                                   request_blocks=n, seed=request.seed, engine=engine) for c in (False, True))
             for n in sizes]
    devices = run.devices(default="cpu")
    for kind, _ in devices:      # up front: a sweep never stops at its largest size for want of memory
        for n, (planned, _) in zip(sizes, plans):
            try:
                check_fits(planned, kind, "use smaller --request-blocks or fewer --layers")
            except UserError as exc:
                raise reworded(exc, f"{kind}, --request-blocks {n}: {exc}") from None
    need_nixl()
    refused = plans[0][0].verdict
    if not refused.accepts:    # worth knowing before reading the figures; stdout stays the document
        fix = f" (--block-size {refused.suggested_block_size} fixes it)" if refused.suggested_block_size else ""
        said(f"warning: {refused.releases} would refuse this pairing at handshake{fix}: "
             + " ".join(r.message for r in refused.refusals).rstrip(".") + f"; bench measures {moved(semantics)} of it")
    if any(w.code == "draft-layers" for w in plans[0][0].warnings):
        said("warning: draft-layers: bench moves the target's layers only, not the draft's (mambaxfer does not "
             "plan them; 'mambaxfer plan' says why)")
    return VllmBench(p_tp, d_tp, semantics, sizes, [(a, b) for a, b in plans], devices)


def bench(model: ModelArgs, pair: PairArgs, engines: EngineArgs, request: RequestArgs, run: RunArgs, sweep: str,
          chart: Path | None) -> Report:
    """vLLM's bench, planned and measured; its report."""
    from mambaxfer_cli.cli.outcome import one_line_when_the_run_fails
    from mambaxfer_cli.render.bench_view import BenchProgress

    prepared = prepare_vllm(model, pair, engines, request, run, sweep, chart)
    with one_line_when_the_run_fails(), BenchProgress(prepared.steps) as view:
        document = prepared.measure(run, view)
    hint = f"'mambaxfer check --model {model.model} --pairs {prepared.p_tp}:{prepared.d_tp}' says which"
    return BenchReport(document, chart, prepared.semantics == Semantics.vllm.value, hint)


class BenchReport(Report):
    """Bench's figures: its tables; the chart written after them; wrong bytes said last."""

    def __init__(self, document: dict, chart: Path | None, vllm_reads: bool, hint: str) -> None:
        super().__init__(document, EXIT_OK if document["verified"] else EXIT_WRONG)
        self.chart, self.vllm_reads, self.hint = chart, vllm_reads, hint

    def render(self, width: int) -> list:
        from mambaxfer_cli.render.bench_view import bench_tables

        return list(bench_tables(self.document))

    def notes(self) -> list[str]:
        from mambaxfer_cli.engines.vllm.transfer.bench import draw_chart

        notes = chart_notes(draw_chart, self.document, self.chart)
        if not self.document["verified"]:
            wrong = sum(row["wrong_bytes"] for point in self.document["points"]
                        for rows in point["variants"].values() for row in rows.values())
            how = ("vLLM's reads (--semantics vllm) land these bytes wrong" if self.vllm_reads
                   else "mambaxfer's plan landed these bytes wrong")
            notes.append(f"wrong bytes: {wrong} over the runs marked WRONG; {how}; {self.hint}")
        return notes
