"""Will these two ``vllm serve`` engines work together as P and D, and if not, what to change?

Each line becomes the engine its vLLM release builds from it on the GPU (model, dtypes, geometry);
then the pairing gets vLLM's own verdict (what its engines refuse at start-up and its handshake refuses), a
byte-level check of the reads vLLM would issue (``check``'s simulation, D reading P's pages with
D's offsets), and, when anything fails, the smallest set of flag changes that makes it work.

The rooms, in the order a run goes through them: ``served`` (each line read into its engine),
``fields`` (what is compared), ``refusals`` (vLLM's verdict), ``fix`` (the flag changes) and
``report`` (the document).
"""

from __future__ import annotations

from mambaxfer_cli.engines.vllm.preflight.served import ServedEngine, build_engine
from mambaxfer_cli.engines.vllm.preflight.fields import hashed_fields
from mambaxfer_cli.preflight.report import DECODE, PREFILL, SCHEMA, Field, Fix, quote_lines
from mambaxfer_cli.engines.vllm.preflight.refusals import Assessment, assess
from mambaxfer_cli.engines.vllm.preflight.fix import find_fix
from mambaxfer_cli.engines.vllm.preflight.report import Report, preflight

__all__ = [
    "Assessment", "DECODE", "Field", "Fix", "PREFILL", "Report", "SCHEMA", "ServedEngine", "assess",
    "build_engine", "find_fix", "hashed_fields", "preflight", "quote_lines",
]
