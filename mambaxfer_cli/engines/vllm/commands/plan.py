"""``plan`` for vLLM: the reads and descriptor-ID maps of one pairing, and vLLM's verdict."""

from __future__ import annotations

from mambaxfer_cli.cli.options import EngineArgs, Format, ModelArgs, OutputArgs, PairArgs, RequestArgs, dump
from mambaxfer_cli.engines.vllm.commands import served
from mambaxfer_cli.engines.vllm.options import build, plan_options
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.render.report import Report


def plan(model: ModelArgs, pair: PairArgs, engines: EngineArgs, request: RequestArgs, output: OutputArgs,
         d_rank: int | None, show: str | None) -> Report:
    from mambaxfer_cli.engines.vllm.plan import build_plan

    p_tp, d_tp = pair.p_tp or 0, pair.d_tp or 0
    sections = shown_sections(show)
    built = build(engines)
    spec = served(model, engines, built, built.release_names, (p_tp, d_tp))
    options = plan_options(request, built, speculative=engines.speculative_config)
    check_document_fits(spec, p_tp, d_tp, options, d_rank, output.document_format())
    result = build_plan(spec, p_tp, d_tp, options)
    document = result.to_dict(d_rank)  # validates --d-rank before anything is written
    return PlanReport(result, document, d_rank, sections)


class PlanReport(Report):
    """A plan: its document, or its tables; with --output, the document in the file and a summary."""

    def __init__(self, result, document: dict, d_rank: int | None, sections: tuple[str, ...]) -> None:
        super().__init__(document)
        self.result, self.d_rank, self.sections = result, d_rank, sections

    def render(self, width: int):
        from mambaxfer_cli.engines.vllm.views.plan import render_plan

        return render_plan(self.result, self.d_rank, self.sections, width)

    def written(self, path) -> list:
        from mambaxfer_cli.engines.vllm.views.plan import verdict_line

        warnings = self.document["warnings"]
        said = f": {', '.join(w['code'] for w in warnings)}" if warnings else ""
        return [verdict_line(self.result),
                f"wrote {path}: {len(self.document['reads'])} reads, {len(self.document['descriptors']['reads'])} "
                f"descriptor reads, {len(warnings)} warning{'' if len(warnings) == 1 else 's'}{said}"]


def shown_sections(show: str | None) -> tuple[str, ...]:
    """``--show layouts,ids`` (or ``all``) as the sections to add to the brief form."""
    if show is None:
        return ()
    from mambaxfer_cli.engines.vllm.views.plan import SECTIONS

    names = [name.strip().lower() for name in show.split(",") if name.strip()]
    if "all" in names:
        return SECTIONS
    unknown = [name for name in names if name not in SECTIONS]
    if unknown or not names:
        raise UserError(f"--show: {'unknown section ' + repr(unknown[0]) if unknown else 'name a section'}; "
                        f"choose from {', '.join(SECTIONS)} or all, comma-separated")
    return tuple(name for name in SECTIONS if name in names)


def _values(document) -> int:
    """Values in a document as ``limits.check_document`` counts them (a dict's keys included)."""
    if isinstance(document, dict):
        return 1 + len(document) + sum(map(_values, document.values()))
    return 1 + (sum(map(_values, document)) if isinstance(document, list) else 0)


def check_document_fits(spec, p_tp: int, d_tp: int, options, d_rank: int | None, fmt: Format) -> None:
    """Refuse, before building it, a plan whose document ``execute --plan`` could not read back (more
    than MAX_FILE_BYTES or MAX_NODES values), from the growth between the plans for 1 and 2 blocks."""
    import re
    from dataclasses import replace

    from mambaxfer_cli.limits import MAX_FILE_BYTES, MAX_NODES
    from mambaxfer_cli.engines.vllm.plan import build_plan

    listed = max((len(re.findall(r"\d+", text)) for text in (options.prefill_blocks, options.decode_blocks)
                  if text is not None), default=0)
    blocks = max(options.request_blocks, listed)
    if blocks <= 2:
        return
    sizes = []
    for k in (1, 2):
        small = build_plan(spec, p_tp, d_tp, replace(options, request_blocks=k, prefill_blocks=None,
                                                     decode_blocks=None))
        document = small.to_dict(d_rank)
        sizes.append((_values(document), len(dump(document, fmt).encode())))
    (n1, b1), (n2, b2) = sizes
    room = 1.05      # the IDs' widths vary
    nodes, size = room * (n1 + (n2 - n1) * (blocks - 1)), room * (b1 + (b2 - b1) * (blocks - 1))
    if nodes <= MAX_NODES and size <= MAX_FILE_BYTES:
        return
    most = 1 + min(int((MAX_NODES / room - n1) // max(n2 - n1, 1)),
                   int((MAX_FILE_BYTES / room - b1) // max(b2 - b1, 1)))
    raise UserError(f"{blocks} request blocks make a plan document of about {size / 2**20:,.1f} MiB and "
                    f"{nodes:,.0f} values, past what execute --plan reads ({MAX_FILE_BYTES >> 20} MiB, {MAX_NODES:,} "
                    f"values); use at most {max(most, 1)} for {spec.name} {p_tp}:{d_tp}")
