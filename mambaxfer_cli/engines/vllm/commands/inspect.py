"""``inspect`` for vLLM: every rank's state layout, and the block geometry the release derives."""

from __future__ import annotations

from mambaxfer_cli.cli.options import EngineArgs, ModelArgs, parse_tp_list
from mambaxfer_cli.engines.vllm.commands import served
from mambaxfer_cli.engines.vllm.options import build
from mambaxfer_cli.render.report import AsIs, Report


def inspect(model: ModelArgs, engines: EngineArgs, tp: str) -> Report:
    """``tp``: the TP sizes, comma-separated."""
    from mambaxfer_cli.engines.vllm.engine import engine_layout
    from mambaxfer_cli.engines.vllm.drafts import planned_at
    from mambaxfer_cli.engines.vllm.kv_groups import model_grouping

    built = build(engines)
    flags = built.decode
    sizes = parse_tp_list(tp)
    spec = served(model, engines, built, (flags.release.name,), sizes)
    # a drafter of other pages as each TP size's ranks hold it (drafts.planned_at)
    at = {size: planned_at(spec, size) for size in sizes}
    sides = {size: engine_layout(at[size], size, flags, model_grouping(at[size])) for size in sizes}
    document = {"schema": "mambaxfer.inspect/v1", "vllm_version": flags.release.name, "gpu": flags.gpu.spec,
                "model": spec.to_dict(),
                "layouts": {str(size): [r.to_dict() for r in side.ranks] for size, side in sides.items()},
                "engines": {str(size): side.geometry.to_dict() for size, side in sides.items()}}
    return InspectReport(document, spec, flags, sides)


class InspectReport(Report):
    def __init__(self, document: dict, spec, flags, sides: dict) -> None:
        super().__init__(document)
        self.spec, self.flags, self.sides = spec, flags, sides

    def render(self, width: int) -> list:
        from mambaxfer_cli.render.console import together
        from mambaxfer_cli.engines.vllm.engine import Engines
        from mambaxfer_cli.engines.vllm.views.model import geometry_line, side_caches_line
        from mambaxfer_cli.render.model_view import layout_table, model_summary

        tables = together([layout_table(f"TP {size}", side.ranks) for size, side in self.sides.items()], "layouts")
        parts = [AsIs(model_summary(self.spec)), AsIs(Engines(self.flags, self.flags).describe())]
        if self.spec.draft_attention:
            (heads, size), n = self.spec.draft_attention, self.spec.draft_layers
            parts.append(AsIs(f"the drafter's {n} layer{'s' * (n > 1)}: {heads} KV heads of {size}, KV-cache "
                              f"groups of their own; every page raised to the largest "
                              f"(unify_kv_cache_spec_page_size) where a rank's pages differ"))
        for size, table in zip(self.sides, tables):
            parts += [table, AsIs(geometry_line(f"engine at TP {size}:", self.sides[size]))]
            line = side_caches_line(self.spec, self.sides[size])
            if line:
                parts.append(AsIs(line))
        return parts
