"""AliceAI in SGLang."""
from mambaxfer_cli.engines.sglang.families import FamilyRule
# No srt/models/ file of SGLang 0.5.23 names AliceAIForCausalLM, nor does any config class.
SGLANG_0_5_23 = {"AliceAI": FamilyRule(False, note="SGLang 0.5.23 has no AliceAI model file")}
