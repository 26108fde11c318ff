"""Qwen4Exp in SGLang."""
from mambaxfer_cli.engines.sglang.families import FamilyRule
SGLANG_0_5_23 = {
    "Qwen4Exp": FamilyRule(False, engine_serves=True,
                           note="SGLang 0.5.23 serves Qwen4Exp (models/qwen4_exp.py) with a PLE state mambaxfer does "
                                "not model for SGLang"),
}
