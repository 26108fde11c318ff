"""Zamba2 in SGLang."""
from mambaxfer_cli.engines.sglang.families import FamilyRule
SGLANG_0_5_23 = {"Zamba2": FamilyRule(False, note="SGLang 0.5.23 has no Zamba2 model file")}
