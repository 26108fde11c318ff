"""GLM-5-Next in SGLang."""
from mambaxfer_cli.engines.sglang.families import FamilyRule
SGLANG_0_5_23 = {
    "GLM-5-Next": FamilyRule(False, engine_serves=True,
                             note="SGLang 0.5.23 serves GLM-5-Next (models/glm5_next.py, whose EntryClass is "
                                  "Glm5NextForConditionalGeneration only), but mambaxfer does not model its KDA, "
                                  "sparse MLA and indexer transfer for SGLang"),
}
