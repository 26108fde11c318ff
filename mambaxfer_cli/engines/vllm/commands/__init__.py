"""What the commands run under ``--engine vllm``: each command's body, a module each, imported
when ``ENGINE`` first names it."""

from mambaxfer_cli.engines import submodules

__getattr__ = submodules(__name__)
