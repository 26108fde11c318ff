"""What the commands run under ``--engine vllm``: each command's body, a module each, imported
when ``ENGINE`` first names it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from mambaxfer_cli.engines import submodules

if TYPE_CHECKING:
    from mambaxfer_cli.cli.options import EngineArgs, ModelArgs
    from mambaxfer_cli.engines.vllm.engine import Engines
    from mambaxfer_cli.planning.model import ModelSpec

__getattr__ = submodules(__name__)


def served(model: ModelArgs, engines: EngineArgs, built: Engines, releases: Iterable[str],
           tp_sizes: Iterable[int] = ()) -> ModelSpec:
    """The model as the engines run it: on D's GPU, with the draft layers --speculative-config adds."""
    from mambaxfer_cli.engines.vllm.gpu import on_gpu
    from mambaxfer_cli.engines.vllm.options import drafted
    from mambaxfer_cli.engines.vllm.startup import startup

    spec, = drafted([on_gpu(model.load(startup=startup(releases, tp_sizes)), built.decode.gpu)], model, engines, built)
    return spec
