"""``mambaxfer bench``: the plan's real transfer, coalesced and one descriptor, pull and push."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from mambaxfer_cli.cli.options import (
    EngineArgs, ModelArgs, OutputArgs, PairArgs, RequestArgs, RunArgs, Semantics,
)
from mambaxfer_cli.cli.outcome import said
from mambaxfer_cli.cli.params import OUTPUT, REQUEST, command, option
from mambaxfer_cli.cli.report import Report, finish
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.exits import EXIT_OK, EXIT_RUN_FAILED, EXIT_WRONG


def _sizes(text: str) -> list[int]:
    from mambaxfer_cli.limits import check_bounds

    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--request-blocks '{text[:40]}': give block counts like '1,4,16'") from None
    if not sizes:
        raise UserError(f"--request-blocks '{text[:40]}': give block counts like '1,4,16'")
    for size in sizes:
        check_bounds(request_blocks=size)
    return sizes


@command(uses={"model": ModelArgs.given("model", "variant"), "engines": EngineArgs.given(*EngineArgs.SHARED),
               "request": RequestArgs.given("semantics", "seed"), "output": OutputArgs.given("fmt")},
         required=("model", "p_tp", "d_tp"), defaults={"iters": 20})
def bench(
    model: ModelArgs,
    pair: PairArgs,
    engines: EngineArgs,
    request: RequestArgs,
    run: RunArgs,
    output: OutputArgs,
    sweep: str = option(
        "--request-blocks", help="Request sizes to sweep: logical blocks per KV-cache group, comma-separated.",
        panel=REQUEST, default="1,4,16"),
    chart: Path | None = option("--chart", help="Write a PNG of GB/s against request size (needs matplotlib).",
                                panel=OUTPUT, kind=click.Path(path_type=Path)),
) -> None:
    """Measure the plan's transfer between real NIXL agents, as planned, coalesced, and as one
    descriptor per source (the machine's limit), pulled (D READs) and pushed (P WRITEs); every
    byte verified.

    With --engine sglang: SGLang's WRITE of one slot per entry, as planned and as one descriptor per
    P -> D pair. With --engine vllm,sglang: both engines in one run, side by side.

    Exit 0: every byte verified; 1: wrong bytes; 2: user error; 3: a run failed; 70: an internal
    error; 130: interrupted (every rank is stopped).

    [bold]Examples[/]

    mambaxfer bench --model jamba --p-tp 1 --d-tp 4 --request-blocks 1,4,16,64

    mambaxfer bench --model qwen3-next-80b --p-tp 2 --d-tp 1 --format json --chart bench.png

    mambaxfer bench --engine vllm,sglang --model nemotron-h-8b --p-tp 1 --d-tp 2
    """
    named = [name.strip().lower() for name in engines.engine.split(",")]
    if named == ["sglang"]:
        from mambaxfer_cli.cli import sglang_bench

        sglang_bench.run(model, pair, engines, request, run, output)
        return
    if sorted(named) == ["sglang", "vllm"]:
        from mambaxfer_cli.cli import engines_bench

        engines_bench.run(model, pair, engines, request, run, output, sweep, chart)
        return
    from mambaxfer_cli.cli.outcome import red_line
    from mambaxfer_cli.execute.coordinator import RunFailure
    from mambaxfer_cli.render.bench_view import BenchProgress

    prepared = prepare_vllm(model, pair, engines, request, run, sweep, chart)
    with BenchProgress(prepared.steps) as view:
        try:
            document = measure_vllm(prepared, run, view)
        except RunFailure as exc:
            red_line(str(exc))   # one red line, with the run's own exit code
            raise click.exceptions.Exit(EXIT_RUN_FAILED) from None
    hint = f"'mambaxfer check --model {model.model} --pairs {prepared.p_tp}:{prepared.d_tp}' says which"
    finish(BenchReport(document, chart, prepared.semantics == Semantics.vllm.value, hint), output)


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


def prepare_vllm(model: ModelArgs, pair: PairArgs, engines: EngineArgs, request: RequestArgs, run: RunArgs,
                 sweep: str, chart: Path | None) -> VllmBench:
    """vLLM's bench planned: options checked, the plans made, the memory checked, NIXL found."""
    import importlib.util

    from mambaxfer_cli.execute.nixl_api import INSTALL_HINT
    from mambaxfer_cli.limits import check_bounds, finite_seconds

    p_tp, d_tp = pair.p_tp or 0, pair.d_tp or 0
    check_bounds(p_tp=p_tp, d_tp=d_tp, layers=run.layers, iters=run.iters, seed=request.seed)
    finite_seconds("--timeout", run.timeout)
    sizes = _sizes(sweep)
    if chart is not None and chart.suffix.lower() != ".png":
        raise UserError(f"--chart {chart}: the chart is a PNG; name it *.png")
    from mambaxfer_cli.execute.plan_source import cut_layers, plan_to_execute
    from mambaxfer_cli.execute.tasks import check_fits

    engine = engines.build().decode
    spec = cut_layers(model.load(), run.layers)
    semantics = request.reads()
    plans = [tuple(plan_to_execute(spec, p_tp, d_tp, semantics=semantics, coalesce=c, blocks=None,
                                   request_blocks=n, seed=request.seed, engine=engine) for c in (False, True))
             for n in sizes]
    devices = run.devices(default="cpu")
    for kind, _ in devices:      # up front: a sweep never stops at its largest size for want of memory
        for n, (planned, _) in zip(sizes, plans):
            try:
                check_fits(planned, kind, "use smaller --request-blocks or fewer --layers")
            except UserError as exc:
                raise UserError(f"{kind}, --request-blocks {n}: {exc}") from None
    if importlib.util.find_spec("nixl") is None:
        raise UserError(f"NIXL is not installed; {INSTALL_HINT}")
    refused = plans[0][0].verdict
    if not refused.accepts:    # worth knowing before reading the figures; stdout stays the document
        fix = f" (--block-size {refused.suggested_block_size} fixes it)" if refused.suggested_block_size else ""
        said(f"warning: {refused.releases} would refuse this pairing at handshake{fix}: "
             + " ".join(r.message for r in refused.refusals).rstrip(".") + "; bench measures mambaxfer's plan of it")
    return VllmBench(p_tp, d_tp, semantics, sizes, [(a, b) for a, b in plans], devices)


def measure_vllm(prepared: VllmBench, run: RunArgs, view: Any) -> dict[str, Any]:
    """Run vLLM's bench (``view``: a BenchProgress); the ``mambaxfer.bench/v1`` document. A failed
    run raises RunFailure."""
    from mambaxfer_cli.bench.measure import bench_document, bench_point

    points = []
    for kind, gpus in prepared.devices:
        for n, (planned, coalesced) in zip(prepared.sizes, prepared.plans):
            view.start(f"{kind} {n} blocks/request")
            try:
                points.append(bench_point(planned, coalesced, kind, gpus, run.iters, run.timeout, view.update))
            except UserError as exc:
                raise UserError(f"{kind}, --request-blocks {n}: {exc}") from None
            view.advance()
    first = prepared.plans[0][0]
    return {**bench_document(first, points, run.iters), **first.engines.to_dict()}


class BenchReport(Report):
    """Bench's figures: its tables; the chart written after them; wrong bytes said last."""

    def __init__(self, document: dict, chart: Path | None, vllm_reads: bool, hint: str) -> None:
        super().__init__(document, EXIT_OK if document["verified"] else EXIT_WRONG)
        self.chart, self.vllm_reads, self.hint = chart, vllm_reads, hint

    def render(self, width: int) -> list:
        from mambaxfer_cli.render.bench_view import bench_tables

        return list(bench_tables(self.document))

    def notes(self) -> list[str]:
        from mambaxfer_cli.bench.measure import write_chart

        notes = []
        if self.chart is not None:
            why = write_chart(self.document, self.chart)
            notes.append(f"chart skipped: {why}" if why else f"chart written to {self.chart}")
        if not self.document["verified"]:
            wrong = sum(row["wrong_bytes"] for point in self.document["points"]
                        for rows in point["variants"].values() for row in rows.values())
            how = ("vLLM's reads (--semantics vllm) land these bytes wrong" if self.vllm_reads
                   else "mambaxfer's plan landed these bytes wrong")
            notes.append(f"wrong bytes: {wrong} over the runs marked WRONG; {how}; {self.hint}")
        return notes
