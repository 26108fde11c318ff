"""A release, a variant and an engine are each found by a registry: adding one is adding its
module (or folder), in a temporary copy of the package, and the commands then know it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "mambaxfer_cli"
HF = Path(__file__).parent / "fixtures" / "hf-configs"


@pytest.fixture
def copy(tmp_path):
    """A copy of the package, imported first by the commands ``run`` starts."""
    shutil.copytree(PACKAGE, tmp_path / "mambaxfer_cli", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "mambaxfer_cli"


def run(copy: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(copy.parent), "COLUMNS": "100"}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          cwd=copy.parent, timeout=120)


def files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def test_a_release_is_one_folder(copy):
    releases = copy / "engines" / "vllm" / "releases"
    before = files(copy)
    shutil.copytree(releases / "v0_34", releases / "v0_35", ignore=shutil.ignore_patterns("__pycache__"))
    assert files(copy) - before == {"engines/vllm/releases/v0_35/__init__.py",
                                    "engines/vllm/releases/v0_35/serve_flags.json",
                                    "engines/vllm/releases/v0_35/architectures.json"}

    planned = run(copy, "-m", "mambaxfer_cli", "plan", "-m", "jamba", "--p-tp", "1", "--d-tp", "2",
                  "--vllm-version", "0.35", "--format", "json")
    assert planned.returncode == 0, planned.stderr
    document = json.loads(planned.stdout)
    assert document["vllm_versions"] == {"prefill": "0.35", "decode": "0.35"}
    assert document["vllm"]["releases"] == "vLLM 0.35" and document["engines"]["decode"]["vllm_version"] == "0.35"

    helped = run(copy, "-m", "mambaxfer_cli", "plan", "--help")
    assert "0.33, 0.34 or 0.35" in " ".join(helped.stdout.replace("│", " ").split())

    known = run(copy, "-c", "from mambaxfer_cli.engines.vllm.conformance.adapter import KNOWN_RELEASES, release_for; "
                            "from mambaxfer_cli.engines.vllm.serve_args import resolve; "
                            "print(KNOWN_RELEASES, release_for('0.35.1'), "
                            "resolve('--max-num-inflight-kv-loads').releases)")
    assert known.returncode == 0, known.stderr
    assert known.stdout.split("\n")[0] == "('0.33', '0.34', '0.35') 0.35 ('0.34', '0.35')"


MAMBA3 = '''"""A made-up variant: Mamba2's regions under another name."""

from dataclasses import replace

from mambaxfer_cli.planning.variants.mamba2 import VARIANT as MAMBA2

VARIANT = replace(MAMBA2, name="mamba3", title="Mamba3", order=5, signature=(), detect_rank=9)
'''


def variant_enums(node) -> list:
    """Every ``variant`` property's enum in a schema."""
    if isinstance(node, list):
        return [e for item in node for e in variant_enums(item)]
    if not isinstance(node, dict):
        return []
    own = [node["variant"]["enum"]] if isinstance(node.get("variant"), dict) and "enum" in node["variant"] else []
    return own + [e for value in node.values() for e in variant_enums(value)]


def test_a_variant_is_one_module(copy):
    before = files(copy)
    (copy / "planning" / "variants" / "mamba3.py").write_text(MAMBA3)
    assert files(copy) - before == {"planning/variants/mamba3.py"}

    config = str(HF / "ibm-granite__granite-4.0-h-tiny.partial.json")
    planned = run(copy, "-m", "mambaxfer_cli", "plan", "-m", config, "--variant", "mamba3", "--p-tp", "2",
                  "--d-tp", "1", "--format", "json")
    assert planned.returncode == 0, planned.stderr
    document = json.loads(planned.stdout)
    assert document["model"]["variant"] == "mamba3"
    assert [r["name"] for r in document["prefill"]["ranks"][0]["regions"]] == ["x", "B", "C", "ssm"]

    for name in ("plan", "inspect", "models"):
        schema = json.loads(run(copy, "-m", "mambaxfer_cli", "schema", name).stdout)
        assert variant_enums(schema) == [["mamba1", "mamba2", "gdn", "kda", "mamba3", "short_conv",
                                           "lightning", "cca"]], name

    refused = run(copy, "-m", "mambaxfer_cli", "plan", "-m", config, "--variant", "mamba4", "--p-tp", "1",
                  "--d-tp", "1")
    assert refused.returncode == 2 and "'mamba3'" in refused.stderr


def test_every_variant_numbers_its_regions_alike():
    # A region two variants share (x, ssm) has one ID in the proof's byte pattern; two regions never share one,
    # nor one of the pattern's own (KV, padding, side caches); SGLang's byte tags keep an ID in four bits.
    from mambaxfer_cli.planning.variants import VARIANTS
    from mambaxfer_cli.proof.pattern import REGION_IDS

    seen: dict[str, int] = {}
    for variant in VARIANTS.values():
        assert set(variant.region_ids) == {r.name for r in variant.regions} == set(variant.colours)
        for region, number in variant.region_ids.items():
            assert seen.setdefault(region, number) == number and 1 <= number < 16
    assert len(set(seen.values())) == len(seen)
    assert not set(seen.values()) & {REGION_IDS[name] for name in REGION_IDS if name not in seen}


def test_an_engine_is_one_package(copy):
    from mambaxfer_cli.engines import engine, names

    assert names() == ("sglang", "vllm") and engine("vllm").release_names() == ("0.33", "0.34")
    assert engine("sglang").release_names() == ("0.5.23",)
    shutil.copytree(copy / "engines" / "vllm", copy / "engines" / "other", ignore=shutil.ignore_patterns("__pycache__"))
    listed = run(copy, "-c", "from mambaxfer_cli.engines import names; print(names())")
    assert listed.stdout.strip() == "('other', 'sglang', 'vllm')"
    refused = run(copy, "-m", "mambaxfer_cli", "plan", "-m", "jamba", "--p-tp", "1", "--d-tp", "1", "--engine", "nope")
    assert refused.returncode == 2 and "mambaxfer knows other, sglang, vllm" in refused.stderr


UNANSWERED_ENGINE = """
from mambaxfer_cli.errors import UserError


class Other:
    name = "other"
    title = "Other"
    unanswered = "--engine other: the commands do not answer for Other yet"

    def release_names(self):
        return ("1.0",)

    def release(self, name):
        return "1.0"

    def read_serve_line(self, text, origin=""):
        raise UserError(self.unanswered)


ENGINE = Other()
"""


def test_an_engine_the_commands_do_not_answer_for_is_refused_in_one_line(copy):
    """A registered engine whose rules the commands do not apply yet: naming it is its own one
    line and exit 2, never vLLM's answer under another name. SGLang answers; a model SGLang does
    not serve is refused as SGLang's."""
    (copy / "engines" / "other").mkdir()
    (copy / "engines" / "other" / "__init__.py").write_text(UNANSWERED_ENGINE)
    for command in (("plan", "-m", "jamba", "--p-tp", "1", "--d-tp", "2"),
                    ("execute", "-m", "jamba", "--p-tp", "1", "--d-tp", "2", "--device", "cpu")):
        done = run(copy, "-m", "mambaxfer_cli", *command, "--engine", "other")
        assert done.returncode == 2 and done.stdout == "", command
        assert "the commands do not answer for Other yet" in done.stderr and "Traceback" not in done.stderr
    jamba = run(copy, "-m", "mambaxfer_cli", "plan", "-m", "jamba", "--p-tp", "1", "--d-tp", "2", "--engine", "sglang")
    assert jamba.returncode == 1 and jamba.stdout == "" and "SGLang 0.5.23 has no Jamba model file" in jamba.stderr
