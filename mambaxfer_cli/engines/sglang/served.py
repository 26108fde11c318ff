"""Which models SGLang 0.5.23 serves, as its own code decides: its model registry (``ModelRegistry``
collects each ``srt/models/`` file's ``EntryClass``: ``releases/v0_5_23/architectures.json``,
written by ``scripts/sglang_architectures.py``), and, of those, the ones whose recurrent state
its pool keeps (``configs/hybrid_arch.py`` ``mambaish_config``) that no family of mambaxfer reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from mambaxfer_cli.engines.sglang.families import merged
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.planning.model import Variant
from mambaxfer_cli.planning.startup import architecture_names
from mambaxfer_cli.readers.model_config import DtypeFacts, Startup, config_dtypes

_DATA = Path(__file__).parent / "releases" / "v0_5_23" / "architectures.json"
# SGLang 0.5.23's architectures, each with the srt/models/ file whose EntryClass names it.
ARCHITECTURES: Mapping[str, str] = json.loads(_DATA.read_text())["served"]

# What mambaish_config (configs/hybrid_arch.py) finds a state in, by architecture, where mambaxfer
# reads no family: (label, the config class it tests, the branch that finds it). A family module
# of families/ gives those of its family (STATE_NOT_READ).
STATE_NOT_READ: Mapping[str, tuple[str, str, str]] = {
    **merged("STATE_NOT_READ"),
    "InternS2PreviewForConditionalGeneration": ("InternS2-Preview", "InternS2PreviewConfig", "hybrid_gdn_config"),
}


def state_not_read(arch: str, version: str) -> str:
    label, config_class, branch = STATE_NOT_READ[arch]
    return (f"SGLang {version} serves {label} ({ARCHITECTURES[arch]}, {arch}) and keeps a recurrent state for it "
            f"({config_class}, found by {branch} in configs/hybrid_arch.py mambaish_config), but mambaxfer does "
            f"not model its state transfer for SGLang")


def read_dtypes(facts: DtypeFacts) -> dict[str, Any]:
    """The dtypes the config names, a float32 checkpoint marked as one (``shapes.sglang_model``'s float16)."""
    float32 = not facts.dtype and facts.config[0] == "float32"
    return {**config_dtypes(facts), **({"checkpoint_dtype": "float32"} if float32 else {})}


def startup(version: str) -> Startup:
    """``spec_from_config``'s ``startup`` for SGLang: a user error for an architecture whose state
    mambaxfer does not read, and its dtypes (``read_dtypes``)."""
    def refused(config: Mapping[str, Any], read: Mapping[str, Any], variant: Variant | None, where: str) -> None:
        found = [a for a in architecture_names(config) if a in STATE_NOT_READ]
        if found:
            raise UserError(f"{where}: {state_not_read(found[0], version)}")
    return Startup(refused, read_dtypes)


def missing_class(config: Mapping[str, Any], version: str) -> str | None:
    """Where no architecture the config names is in SGLang's registry (None: one is, or the
    config names none)."""
    archs = architecture_names(config)
    if archs and not any(a in ARCHITECTURES for a in archs):
        return (f"SGLang {version} has no model class {archs[0]}: no srt/models/ file's EntryClass names it "
                f"(ModelRegistry); it would start only on its Transformers backend (--model-impl, "
                f"model_loader/utils.py), whose model mambaish_config (configs/hybrid_arch.py) gives no Mamba "
                f"state to transfer")
    return None
