"""The README and docs/ say what the tool does: every example output is the real output (only
timings and rates may differ), every link leads somewhere, the site builds strictly, the README
stays a five-minute read, and nothing cites a reference users do not have."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_module = importlib.util.spec_from_file_location("update_docs", ROOT / "scripts" / "update_docs.py")
update_docs = importlib.util.module_from_spec(_module)
sys.modules["update_docs"] = update_docs        # dataclasses look their module up there
_module.loader.exec_module(update_docs)

EXAMPLES = [example for path in update_docs.documents() for example in update_docs.examples(path)]
# Pages other branches write (the vLLM releases, conformance with vLLM's code): linked from here,
# checked like any page once they exist.
PENDING = {ROOT / "docs" / "releases.md", ROOT / "docs" / "conformance.md"}
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name[:120] for e in EXAMPLES])
def test_every_example_is_the_real_output(example, request):
    if example.needs_nixl:
        request.getfixturevalue("nixl")
    outputs = update_docs.run(example)
    for shown, output in zip(example.shown, outputs):
        assert update_docs.normalise(shown) == update_docs.normalise(output), (
            f"{example.name}: the page shows\n{shown}\nbut the command prints\n{output}\n"
            f"(python scripts/update_docs.py refreshes every example)")


def test_the_examples_cover_the_readme_and_every_page_with_commands():
    counted = {path.name: len(update_docs.examples(path)) for path in update_docs.documents()}
    assert counted["README.md"] >= 5
    for page in ("commands.md", "ci.md", "preflight.md", "models.md", "execute.md"):
        assert counted[page] >= 2, counted


def test_normalise_lets_only_timings_vary():
    a = "moved 19.1 MiB at 10.57 GB/s; listening 1.04s\n│ 0 │ 82.27 ms │ 0.02 │"
    b = "moved 19.1 MiB at 3.5 GB/s; listening 11.40s\n│ 0 │ 182.27 ms │ 13.20 │"
    assert update_docs.normalise(a) == update_docs.normalise(b)
    assert update_docs.normalise(a) != update_docs.normalise(a.replace("19.1 MiB", "37.3 MiB"))
    assert update_docs.normalise("4 passed\n") != update_docs.normalise("4  passed\n")   # exact without timings
    release = "refuses in 0.02 s: vLLM 0.33 would not run this pairing"
    assert update_docs.normalise(release) != update_docs.normalise(release.replace("0.33", "0.34"))


def _links(path: Path):
    for target in LINK.findall(path.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        yield target, (path.parent / target.split("#")[0]).resolve()


def test_every_relative_link_leads_to_a_file_of_the_repository():
    broken = [(str(path.relative_to(ROOT)), target) for path in update_docs.documents()
              for target, resolved in _links(path) if not resolved.exists() and resolved not in PENDING]
    assert not broken


def test_the_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "commands.html").is_file()


def test_the_readme_is_a_five_minute_read_with_the_setup_commands_ci_reads():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 300
    for marker in ("<!-- main-command -->", "<!-- test-command -->"):
        lines = text.split(marker + "\n", 1)[1].splitlines()
        assert lines[0] == "```bash" and lines[1].startswith("python3 -m venv .venv && . .venv/bin/activate")
    ci = (ROOT / ".ci" / "run").read_text()
    assert "<!-- test-command -->" in ci


def test_nothing_cites_a_reference_users_do_not_have():
    word = re.compile(r"\b" + "SP" + r"EC\b|\.\./shared|" + "STY" + r"LE\.md")
    places = [ROOT / "README.md", ROOT / "BENCHMARKS.md",
              *(p for d in ("mambaxfer_cli", "docs", "tests", "examples", "scripts", "benchmarks")
                for p in (ROOT / d).rglob("*") if p.is_file() and p.suffix in (".py", ".md", ".json", ".sh", ".yml",
                                                                                   ".yaml", ".toml"))]
    cited = [f"{p.relative_to(ROOT)}:{n}" for p in places for n, line in enumerate(p.read_text().splitlines(), 1)
             if word.search(line)]
    assert not cited
