"""``mambaxfer conformance``: is mambaxfer right about the engine installed beside it?"""

from __future__ import annotations

from mambaxfer_cli.cli.options import MAX_TP_OPTION, EngineArgs, ModelArgs, OutputArgs, check_writable
from mambaxfer_cli.cli.params import command
from mambaxfer_cli.cli.report import finish
from mambaxfer_cli.engines import engine as serving_engine
from mambaxfer_cli.engines import one
from mambaxfer_cli.errors import Refused, UserError

# A deployment's TP sizes: conformance compares every pairing up to this, per model.
MAX_CONFORMANCE_TP = 64


@command(uses={"model": ModelArgs.given("model", "all_presets"),
               "engine": EngineArgs.given("engine", "speculative_config", "speculative_algorithm",
                                          "speculative_draft_model_path"), "output": OutputArgs.without("output")})
def conformance(model: ModelArgs, engine: EngineArgs, output: OutputArgs, max_tp: int | None = MAX_TP_OPTION) -> None:
    """Run the installed engine's own functions (vLLM's or SGLang's) on each model and P/D pairing
    and compare every answer with mambaxfer's.

    Compared: the conv split and SSM offsets, the sources, the descriptor IDs, both engines'
    geometry, the handshake's verdict and the compatibility hash. Each function agrees, differs
    (the first differing case, both values, and the mambaxfer command that shows ours) or could
    not be called (the installed vLLM changed a signature or an attribute it reads). Needs vLLM in
    the same environment. With --engine sglang: SGLang's own functions (state shapes and dtypes,
    slice blocks, head slices, rank mapping, the pool's entries and its state sends) on the models
    SGLang serves, where SGLang is installed. With --speculative-config (vLLM only): the
    model with the draft layers it adds (MTP, or an EAGLE drafter's), compared alone. With
    --speculative-algorithm and --draft-model (SGLang only): that draft model's KV pool too.

    [bold]Examples[/]

    mambaxfer conformance --all-presets --junit conformance.xml

    mambaxfer conformance --model qwen3.5-0.8b --max-tp 4 --format json

    mambaxfer conformance --engine sglang --all-presets
    """
    from mambaxfer_cli.limits import within

    model.names()     # --model or --all-presets, or one line
    serving_engine(engine.engine)       # an engine mambaxfer knows, or one line
    largest = 8 if max_tp is None else max_tp
    within("--max-tp", largest, 1, MAX_CONFORMANCE_TP, "deployment's TP size")
    if output.junit is not None:   # fail before the run, not after it
        check_writable(output.junit, "--junit")
    try:
        report = one(engine.engine).conformance(model, engine, largest)
    except Refused as exc:      # exit 1 says a function differs: a model the engine refuses is not compared
        raise UserError(str(exc)) from None
    finish(report, output)
