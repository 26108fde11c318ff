"""Jamba in SGLang."""
from mambaxfer_cli.engines.sglang.families import FamilyRule
SGLANG_0_5_23 = {"Jamba": FamilyRule(False, note="SGLang 0.5.23 has no Jamba model file")}
