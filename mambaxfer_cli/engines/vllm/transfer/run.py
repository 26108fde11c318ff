"""An execute run: the plan's rank tasks through the coordinator, and its outcome, the
``mambaxfer.execute/v1`` document."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.execute.coordinator import Progress, run_ranks
from mambaxfer_cli.execute.remote import QUIET
from mambaxfer_cli.execute.results import Checked
from mambaxfer_cli.engines.vllm.transfer.whole_pages import side_pages
from mambaxfer_cli.engines.vllm.transfer.results import DecodeResult, PrefillResult
from mambaxfer_cli.engines.vllm.transfer.tasks import build_tasks
from mambaxfer_cli.execute.side_channel import check_ports
from mambaxfer_cli.execute.tasks import RunSettings
from mambaxfer_cli.engines.vllm.plan import Plan
from mambaxfer_cli.engines.vllm.proof.addresses import read_bytes

SCHEMA = "mambaxfer.execute/v1"


@dataclass
class Outcome(Checked):
    plan: Plan
    settings: RunSettings
    decode: list[DecodeResult]
    prefill: dict[int, PrefillResult]
    phases: dict[str, float] = field(default_factory=dict)   # seconds from the start to each milestone

    @property
    def total_bytes(self) -> int:
        return sum(d.bytes for d in self.decode)

    def served(self, p_rank: int) -> list[dict[str, Any]]:
        """A two-host prefill side: each consumer of a P rank with the bytes the plan READs from it."""
        moved: dict[int, int] = {}
        for read in self.plan.moved_descriptors.reads:
            if read.p_rank == p_rank:
                moved[read.d_rank] = moved.get(read.d_rank, 0) + read_bytes(read.remote, read.remote_ids)
        for d_rank in moved:        # Qwen4Exp: its whole pages ride on the same reads
            for side in side_pages(self.plan, d_rank):
                pages = sum(len(r.remote_ids) for r in side.reads if r.p_rank == p_rank)
                moved[d_rank] += pages * side.prefill_lists.page_bytes
        return [{"d_rank": c.d_rank, "agent": c.agent, "notifications": c.notifications,
                 "bytes": moved.get(c.d_rank, 0)} for c in self.prefill[p_rank].served or ()]

    def to_dict(self) -> dict[str, Any]:
        plan, s = self.plan, self.settings
        prefill_side = s.discovery is not None and s.discovery.role == "prefill"
        return {"schema": SCHEMA, "model": plan.model.name, "semantics": plan.semantics,
                "role": s.discovery.role if s.discovery else "both",
                "p_tp": plan.prefill.tp, "d_tp": plan.decode.tp, "device": s.device, "memory": s.mem_type,
                "iters": s.iters, "request": plan.descriptors.request.to_dict(),
                "verified": None if prefill_side else self.verified,   # the decode side verifies
                "total_bytes": self.total_bytes, "phases_s": self.phases,
                "decode": [d.to_dict() for d in self.decode],
                "prefill": [{"p_rank": p, "consumers": list(r.consumers), "fill_s": r.fill_s,
                             **({"served": self.served(p)} if r.served is not None else {})}
                            for p, r in sorted(self.prefill.items())]}


def execute(plan: Plan, settings: RunSettings, timeout: float, progress: Progress | None = None) -> Outcome:
    """Run the plan with real NIXL transfers; raises UserError (exit 2) or RunFailure (exit 3)."""
    if settings.iters < 1:
        raise UserError("--iters must be >= 1")
    prefill, decode = build_tasks(plan, settings)
    discovery = settings.discovery
    if discovery is not None:   # a two-host run: only this side's ranks run here
        prefill, decode = (prefill, []) if discovery.role == "prefill" else ([], decode)
        finished = run_ranks([*prefill, *decode], settings.run_id, timeout, progress,
                             forced=discovery.environment(), defaults=QUIET)
    else:
        check_ports(settings, len(prefill))
        finished = run_ranks([*prefill, *decode], settings.run_id, timeout, progress)
    results = finished.results
    return Outcome(plan, settings,
                   decode=[r for t in decode if isinstance(r := results[t.name], DecodeResult)],
                   prefill={t.rank: r for t in prefill if isinstance(r := results[t.name], PrefillResult)},
                   phases=finished.phases)
