"""``mambaxfer bench``: the plan's real transfer, coalesced and one descriptor, pull and push."""

from __future__ import annotations

from pathlib import Path

from mambaxfer_cli.cli.options import (
    EngineArgs, ModelArgs, OutputArgs, PairArgs, RequestArgs, RunArgs, Semantics,
)
from mambaxfer_cli.cli.params import OUTPUT, REQUEST, command, option
from mambaxfer_cli.cli.report import Report, finish
from mambaxfer_cli.exits import EXIT_OK, EXIT_WRONG


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
                                panel=OUTPUT),
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
    from mambaxfer_cli.cli.outcome import one_line_when_the_run_fails
    from mambaxfer_cli.cli.vllm_bench import measure_vllm, prepare_vllm
    from mambaxfer_cli.render.bench_view import BenchProgress

    prepared = prepare_vllm(model, pair, engines, request, run, sweep, chart)
    with one_line_when_the_run_fails(), BenchProgress(prepared.steps) as view:
        document = measure_vllm(prepared, run, view)
    hint = f"'mambaxfer check --model {model.model} --pairs {prepared.p_tp}:{prepared.d_tp}' says which"
    finish(BenchReport(document, chart, prepared.semantics == Semantics.vllm.value, hint), output)


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
