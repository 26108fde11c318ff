"""SGLang as an engine: how SGLang 0.5.23's prefill/decode disaggregation moves hybrid-model state.

Which module holds what:
- ``release``: the release as data (dtype defaults and variables, families served, refusals as
  SGLang words them);
- ``shapes``: per-rank state shapes and dtypes (``configs/mamba_utils.py``);
- ``entries``: the slot and its per-(state, layer) transfer entries (``MambaPool``);
- ``slices``: heterogeneous-TP blocks and replicated-state writers (``disaggregation/utils.py``);
- ``ranks``: which prefill ranks serve a decode rank (``_resolve_rank_mapping``);
- ``heads``: attention KV head slices (``compute_head_slice_params``);
- ``bootstrap``: what the two servers' settings make SGLang refuse;
- ``launch_args``: a server's command line as SGLang's parser reads it (preflight);
- ``writes``: what SGLang writes and what it should, compared byte by byte;
- ``verdict``: refused, right, or the bytes it corrupts; ``plan``: one pairing whole;
- ``conformance``: SGLang's own functions against these, run where SGLang is installed.
"""

from typing import Any

from mambaxfer_cli.engines import ServingEngine
from mambaxfer_cli.engines.sglang.plan import SGLangPlan, plan
from mambaxfer_cli.engines.sglang.release import BACKENDS, RELEASES, SGLANG_0_5_23, Release
from mambaxfer_cli.engines.sglang.shapes import sglang_model, tp_sizes
from mambaxfer_cli.engines.sglang.verdict import Verdict, verdict

__all__ = ["BACKENDS", "ENGINE", "RELEASES", "SGLANG_0_5_23", "Release", "SGLangPlan", "Verdict", "plan",
           "sglang_model", "tp_sizes", "verdict"]


# What the commands do not answer for SGLang yet, said the same way wherever it is asked.
NOT_WIRED = None    # every command answers for SGLang 0.5.23


class Sglang:
    """The ``ServingEngine`` of SGLang."""

    name = "sglang"
    title = "SGLang"
    unanswered = NOT_WIRED

    def release_names(self) -> tuple[str, ...]:
        return tuple(RELEASES)

    def release(self, name: str | None) -> Any:
        from mambaxfer_cli.errors import UserError

        if name is None:
            return RELEASES[self.release_names()[-1]]
        if name not in RELEASES:
            raise UserError(f"SGLang {name}: mambaxfer knows SGLang {', '.join(RELEASES)}")
        return RELEASES[name]

    def read_serve_line(self, text: str, origin: str = "--prefill") -> Any:
        from mambaxfer_cli.engines.sglang.launch_args import parse_launch

        return parse_launch(text, origin)


ENGINE: ServingEngine = Sglang()
