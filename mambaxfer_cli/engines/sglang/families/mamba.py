"""Mamba and Mamba2 in SGLang."""
from mambaxfer_cli.engines.sglang.families import FamilyRule
SGLANG_0_5_23 = {
    "Mamba (HF)": FamilyRule(True, note="configs/mamba.py MambaConfig (full-rank Mamba2 layout)"),
    "Mamba2": FamilyRule(True, note="configs/mamba2.py"),
}
