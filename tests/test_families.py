"""A model family is named only in its family modules (issue 34), read from the package's source:
the core's ``families/<name>.py`` and an engine's ``engines/<engine>/families/<name>.py`` (or
``<name>_<part>.py`` beside it). Identifiers, module names and string literals count; docstrings
and comments do not."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "mambaxfer_cli"

# Each family module's name, and how code spells the family (case-insensitive). Not yet listed:
# Mamba / Mamba2 (the variants' own word) and Qwen3-Next / Qwen3.5 (named in 11 modules still).
FAMILY_NAMES = {
    "glm5next": r"glm[-_ ]?5",
    "qwen4exp": r"qwen4[-_ ]?exp",
    "kimi": r"kimi",
    "bailing": r"bailing",
    "nemotron_h": r"nemotron",
    "granite": r"granite|bamba",
    "falcon": r"falcon",
    "zamba2": r"zamba",
    "jamba": r"jamba",
    "lfm2": r"lfm\d",
    "alice_ai": r"alice",
    "gigachat": r"giga[-_ ]?chat",
}



def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _words(source: str) -> list[str]:
    """The identifiers, imported module names and string literals (docstrings aside) of a module."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    words: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            words.append(node.value)
        elif isinstance(node, ast.Name):
            words.append(node.id)
        elif isinstance(node, ast.Attribute):
            words.append(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            words.append(node.name)
        elif isinstance(node, ast.arg):
            words.append(node.arg)
        elif isinstance(node, ast.keyword) and node.arg:
            words.append(node.arg)
        elif isinstance(node, ast.alias):
            words += [node.name, node.asname or ""]
        elif isinstance(node, ast.ImportFrom):
            words.append(node.module or "")
    return words


def _owner(path: str) -> str | None:
    """The family whose module ``path`` (relative to the package) is, if any."""
    parts = path.removesuffix(".py").split("/")
    in_core = len(parts) == 2 and parts[0] == "families"
    in_engine = len(parts) == 4 and parts[0] == "engines" and parts[2] == "families"
    if not (in_core or in_engine):
        return None
    return next((f for f in FAMILY_NAMES if parts[-1] == f or parts[-1].startswith(f + "_")), None)


def named_families(path: str, source: str) -> set[str]:
    """The families a module (``path`` relative to the package) names outside its family's modules."""
    text = "\n".join([path, *_words(source)]).lower()
    owner = _owner(path)
    return {f for f, pattern in FAMILY_NAMES.items() if f != owner and re.search(pattern, text)}


def _found() -> set[tuple[str, str]]:
    found = set()
    for file in sorted(PACKAGE.rglob("*.py")):
        path = file.relative_to(PACKAGE).as_posix()
        found |= {(path, family) for family in named_families(path, file.read_text())}
    return found


def test_a_family_is_named_only_in_its_modules():
    assert sorted(_found()) == []


def test_the_check_catches_a_planted_name():
    planted = ('def f(spec):\n    """Qwen4Exp\'s parts, in a docstring: not code."""\n'
               '    return spec.family == "Qwen4Exp"  # a comment: Kimi\n')
    assert named_families("planning/layout.py", planted) == {"qwen4exp"}
    assert named_families("families/qwen4exp.py", planted) == set()
    assert named_families("engines/vllm/families/qwen4exp_proof.py", planted) == set()
    assert named_families("engines/vllm/families/kimi.py", planted) == {"qwen4exp"}
    assert named_families("planning/layout.py", '"""Qwen4Exp and GLM-5-Next, said in a docstring."""\n') == set()
    assert named_families("render/x.py", "from mambaxfer_cli.families import glm5next\n") == {"glm5next"}
    assert named_families("execute/kimi_pages.py", "") == {"kimi"}
    assert named_families("proof/x.py", "nemotron_h = 1\nz = Zamba2Parts()\n") == {"nemotron_h", "zamba2"}


# --- an engine's rules leave the core: its tables and its module paths live in its package -------

ENGINE_TABLES = ("CONNECTOR_REFUSED", "REGISTRATION_REFUSED", "TRANSFORMERS_BACKEND", "MAMBA_SSM_DTYPE_READERS",
                 "AUTO_FROM_FLOAT32", "VLLM", "SEMANTICS", "INDEXER_KV_DTYPES")
CORE_FOLDERS = ("planning", "readers", "families", "schema")
# vLLM's rules as its words say them (engines/vllm/: dtypes.py, reads.py, startup.py, kv_groups.py, its
# families' attention_refusal and indexer_kv_dtype).
ENGINE_WORDS = (r"vLLM keeps|vLLM sizes|vLLM's --dtype|KDA recurrent state supports|vLLM does not build|NoPE-only"
                r"|vLLM needs one TP size|vLLM cannot split|vLLM does not start|AttentionConfig"
                r"|^vllm_grouping$|^KVGrouping$")


def engine_rules(path: str, source: str) -> list[str]:
    """An engine's tables a core module defines, and the engine module paths and rules its literals name."""
    if path.split("/")[0] not in CORE_FOLDERS:
        return []
    tables = [node.id for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Name)
              and isinstance(node.ctx, ast.Store) and node.id in ENGINE_TABLES]
    return tables + [w for w in _words(source) if re.match(r"(vllm|sglang)\.\w", w) or re.search(ENGINE_WORDS, w)]


def test_the_core_holds_no_engine_rule():
    found = {}
    for file in sorted(PACKAGE.rglob("*.py")):
        path = file.relative_to(PACKAGE).as_posix()
        if engine_rules(path, file.read_text()):
            found[path] = engine_rules(path, file.read_text())
    assert found == {}


def test_the_rule_check_sees_a_planted_table():
    planted = 'CONNECTOR_REFUSED = {"X": ("X", "SHORT_CONV")}\nB = "vllm.v1.attention.backends.x.XBackend"\n'
    assert engine_rules("families/x.py", planted) == ["CONNECTOR_REFUSED", "vllm.v1.attention.backends.x.XBackend"]
    assert engine_rules("engines/vllm/families/x.py", planted) == []
    assert engine_rules("families/x.py", '"""vllm.config in a docstring."""\n') == []
    planted = 'MAMBA_SSM_DTYPE_READERS = ("X",)\nm = f"vLLM keeps this family\'s SSM state in {d}"\n'
    assert engine_rules("readers/x.py", planted) == ["MAMBA_SSM_DTYPE_READERS",
                                                     "vLLM keeps this family's SSM state in "]
    planted = ('VLLM = "vllm"\nclass KVGrouping: ...\ndef vllm_grouping(): ...\n'
               'm = f"vLLM does not start a TP-{tp} engine"\n')
    assert set(engine_rules("planning/x.py", planted)) == {"VLLM", "KVGrouping", "vllm_grouping",
                                                           "vLLM does not start a TP-"}
    assert engine_rules("families/x.py", 'INDEXER_KV_DTYPES = ("auto",)\nw = "(vLLM\'s AttentionConfig)"\n') \
        == ["INDEXER_KV_DTYPES", "(vLLM's AttentionConfig)"]
