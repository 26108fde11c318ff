"""What the commands answer under ``--engine sglang``: the options SGLang's rules read and
refuse, the runs and the reports."""

from mambaxfer_cli.engines import submodules

__getattr__ = submodules(__name__)
