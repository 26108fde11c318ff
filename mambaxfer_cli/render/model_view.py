"""Rich views of models and rank layouts (used by models, inspect and plan)."""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from rich.table import Table
from rich.text import Text

from mambaxfer_cli.planning.layout import RankLayout
from mambaxfer_cli.planning.model import ModelSpec
from mambaxfer_cli.planning.variants import REGION_COLOURS
from mambaxfer_cli.render.console import columns_table

REGION_STYLES = REGION_COLOURS


def human_bytes(n: int) -> str:
    size: float = n
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)


def models_table(specs: Sequence[ModelSpec]) -> Table:
    table = columns_table("Built-in models", [(column, "right" if "layers" in column else "left") for column in (
        "name", "variant", "family", "SSM layers", "attention layers", "conv dtype", "ssm dtype", "source")])
    for spec in specs:
        table.add_row(spec.name, spec.variant.value, spec.family, str(spec.ssm_layers),
                      str(spec.attention_layers), spec.conv_dtype, spec.ssm_dtype, spec.source)
    return table


def model_summary(spec: ModelSpec) -> str:
    params = ", ".join(f"{k}={v}" for k, v in spec.params.items())
    source = f"{spec.source} @ {spec.revision}" if spec.revision else spec.source
    origin = "; ".join(f"{key.split('_')[0]} {getattr(spec, key)} from {spec.origin[key]}"
                       for key in ("conv_dtype", "ssm_dtype") if key in spec.origin)
    return (f"{spec.name} ({source}) · {spec.variant.value} [{spec.family}] · {params} · "
            f"conv_kernel={spec.conv_kernel} num_spec={spec.num_spec} conv_rows={spec.conv_rows} · "
            f"conv {spec.conv_dtype}, ssm {spec.ssm_dtype} · "
            f"{spec.ssm_layers} SSM + {spec.attention_layers} attention layers"
            + (f"\ndtypes: {origin}" if origin else "")
            + (f"\nlayers: from {spec.origin['layers']}" if "layers" in spec.origin else ""))


def layout_table(title: str, layouts: Sequence[RankLayout]) -> Table:
    """One row per rank and region: shard in global units, byte offset and size."""
    table = columns_table(title, [
        ("rank", "right"), ("region", "left"), ("unit", "left"), ("shard", "right"), ("unit bytes", "right"),
        ("offset", "right"), ("size", "right")])
    shards_seen = Counter((r.name, r.shard.start, r.shard.end) for layout in layouts for r in layout.regions)
    for layout in layouts:
        for i, region in enumerate(layout.regions):
            shard = f"[{region.shard.start}, {region.shard.end})"
            if len(layouts) > 1 and shards_seen[(region.name, region.shard.start, region.shard.end)] > 1:
                shard += " rep"
            table.add_row(
                str(layout.rank) if i == 0 else "",
                Text(region.name, style=REGION_STYLES.get(region.name, "")),
                f"{region.kind} {region.unit}",
                shard, str(region.unit_bytes), str(region.offset), str(region.size),
                end_section=i == len(layout.regions) - 1)
    first = layouts[0]
    dims = "(" + ",".join(map(str, first.sub_projection_dims)) + ")"
    table.caption = (f"per rank: dims {dims}, conv_rows={first.conv_rows}, conv_bytes={first.conv_bytes}, "
                     f"ssm_bytes={first.ssm_bytes}, state={first.state_bytes} "
                     f"({human_bytes(first.state_bytes)})"
                     + ("; 'rep' = replicated on several ranks" if any(n > 1 for n in shards_seen.values())
                        and len(layouts) > 1 else ""))
    return table
