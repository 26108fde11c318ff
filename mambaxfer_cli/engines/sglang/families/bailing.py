"""Bailing-V3 in SGLang."""
from mambaxfer_cli.engines.sglang.families import FamilyRule
SGLANG_0_5_23 = {
    "Bailing-V3": FamilyRule(False, engine_serves=True, note="mambaxfer does not model SGLang 0.5.23's KDA transfer"),
}
