"""Falcon-Mamba and Falcon-H1 in SGLang."""
from mambaxfer_cli.engines.sglang.families import FamilyRule
SGLANG_0_5_23 = {
    "Falcon-Mamba": FamilyRule(True, note="configs/mamba.py FalconMambaConfig"),
    "Falcon-H1": FamilyRule(True, config_ssm_dtype=True, note="configs/falcon_h1.py"),
}
