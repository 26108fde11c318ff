"""Granite-4.0-H / Bamba in SGLang."""
from mambaxfer_cli.engines.sglang.families import FamilyRule
SGLANG_0_5_23 = {"Granite-4.0-H / Bamba": FamilyRule(True, note="configs/granitemoehybrid.py (GraniteMoeHybrid)")}
