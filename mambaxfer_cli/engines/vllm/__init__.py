"""vLLM as the serving engine of P and D: its NIXL connector's rules, release by release.

The package holds everything of vLLM mambaxfer knows: its releases (``releases/``, one folder
each), the geometry it builds (``geometry``, ``gpu``, ``engine``), its handshake verdict
(``release``, ``handshake``), its reads and descriptor IDs (``attention``, ``descriptors``,
``plan``), its command-line reader (``serve_args``), the release installed here (``installed``)
and the probe that runs its own code for ``conformance`` (``probe``). Nothing is imported until
a question needs it, so naming the engine costs the command line nothing.
"""

from __future__ import annotations

from typing import Any

from mambaxfer_cli.engines import ServingEngine


class Vllm:
    """The ``ServingEngine`` of vLLM."""

    name = "vllm"
    title = "vLLM"
    unanswered = None

    def release_names(self) -> tuple[str, ...]:
        from mambaxfer_cli.engines.vllm.releases import NAMES

        return NAMES

    def release(self, name: str | None) -> Any:
        if name is None:
            from mambaxfer_cli.engines.vllm.installed import default_release

            return default_release().release
        from mambaxfer_cli.engines.vllm.releases import release

        return release(name)

    def read_serve_line(self, text: str, origin: str = "--prefill") -> Any:
        from mambaxfer_cli.engines.vllm.serve_args import parse_serve

        return parse_serve(text, origin)


ENGINE: ServingEngine = Vllm()
