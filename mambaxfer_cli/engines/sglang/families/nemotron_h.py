"""Nemotron-H in SGLang."""
from mambaxfer_cli.engines.sglang.families import FamilyRule
SGLANG_0_5_23 = {"Nemotron-H": FamilyRule(True, config_ssm_dtype=True, note="configs/nemotron_h.py")}
