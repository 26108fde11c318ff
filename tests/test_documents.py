"""Every document the tool emits names its schema and producer, and validates against the schema
``mambaxfer schema NAME`` publishes."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from cli_run import messages, run_cli
from mambaxfer_cli import __version__
from mambaxfer_cli.schema import DOCUMENTS

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "preflight"
COMMANDS = {
    "plan": ("plan", "--model", "qwen3.5-0.8b", "--p-tp", "2", "--d-tp", "1", "--format", "json"),
    "check": ("check", "--model", "granite-4.0-h-tiny", "--pairs", "1:2,2:1", "--semantics", "vllm",
              "--format", "json"),   # wrong bytes: first_wrong_byte and damage filled in
    "inspect": ("inspect", "--model", "jamba", "--tp", "1,2", "--format", "json"),
    "models": ("models", "--format", "json"),
    "execute": ("execute", "--model", "jamba", "--layers", "4", "--p-tp", "1", "--d-tp", "2", "--device", "cpu",
                "--iters", "1", "--format", "json"),
    "bench": ("bench", "--model", "jamba", "--layers", "2", "--p-tp", "1", "--d-tp", "1", "--request-blocks", "1",
              "--iters", "1", "--device", "cpu", "--format", "json"),
    "preflight": ("preflight", "--prefill-file", str(EXAMPLES / "qwen35-prefill.sh"),
                  "--decode-file", str(EXAMPLES / "qwen35-decode.sh"), "--format", "json"),   # refused, with a fix
    "sglang-plan": ("plan", "--engine", "sglang", "--model", "nemotron-h-8b", "--p-tp", "1", "--d-tp", "2",
                    "--format", "json"),   # wrong bytes
    "sglang-check": ("check", "--engine", "sglang", "--model", "mamba-130m", "--pairs", "1:2,3:2", "--format",
                     "json"),   # right, and wrong bytes with a rank the mapping never reads
    "sglang-inspect": ("inspect", "--engine", "sglang", "--model", "qwen3.5-0.8b", "--tp", "1,2", "--format",
                       "json"),
    "sglang-execute": ("execute", "--engine", "sglang", "--model", "nemotron-h-8b", "--layers", "4", "--p-tp", "1",
                       "--d-tp", "2", "--semantics", "sglang", "--device", "cpu", "--iters", "1", "--format", "json"),
    "sglang-bench": ("bench", "--engine", "sglang", "--model", "qwen3.5-0.8b", "--layers", "2", "--p-tp", "2",
                     "--d-tp", "1", "--iters", "2", "--device", "cpu", "--format", "json"),
    "sglang-models": ("models", "--engine", "sglang", "--format", "json"),
    "check-engines": ("check", "--engine", "vllm,sglang", "--model", "granite-4.0-h-tiny", "--pairs", "1:2,1:1",
                      "--format", "json"),
    "bench-engines": ("bench", "--engine", "vllm,sglang", "--model", "nemotron-h-8b", "--layers", "4", "--p-tp", "2",
                      "--d-tp", "1", "--iters", "1", "--device", "cpu", "--format", "json"),
}


def published(name: str) -> jsonschema.Draft202012Validator:
    result = run_cli("schema", name)
    assert result.code == 0, result.stderr
    schema = json.loads(result.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["schema"] == {"const": f"mambaxfer.{name}/v1"}
    return jsonschema.Draft202012Validator(schema)


# The conformance document needs vLLM (or SGLang) installed: test_conformance (test_sglang_conformance)
# validates it, run by the engine's interpreter.
@pytest.mark.parametrize("name", [name for name in DOCUMENTS if name != "conformance"])
def test_each_document_validates_against_its_published_schema(name, request):
    if name in ("execute", "bench", "sglang-execute", "sglang-bench", "bench-engines"):
        request.getfixturevalue("nixl")
    result = run_cli(*COMMANDS[name])
    assert result.code in (0, 1), result.stderr
    document = json.loads(result.stdout)
    assert document["schema"] == f"mambaxfer.{name}/v1"
    assert document["producer"] == f"mambaxfer {__version__}"
    published(name).validate(document)


@pytest.mark.parametrize("pair", ["qwen3-next", "nemotron"])
def test_the_sglang_preflight_document_validates_against_the_preflight_schema(pair):
    """preflight of two SGLang lines prints the same document, with engine 'sglang' and SGLang's
    verdict in place of vLLM's; the schema holds each engine's document to its own fields."""
    result = run_cli("preflight", "--prefill-file", str(EXAMPLES / f"sglang-{pair}-prefill.sh"),
                     "--decode-file", str(EXAMPLES / f"sglang-{pair}-decode.sh"), "--format", "json")
    assert result.code == 1, result.stderr
    document = json.loads(result.stdout)
    assert document["schema"] == "mambaxfer.preflight/v1" and document["engine"] == "sglang"
    assert document["producer"] == f"mambaxfer {__version__}"
    validator = published("preflight")
    validator.validate(document)
    assert not validator.is_valid({**document, "sglang": None})
    assert not validator.is_valid({key: value for key, value in document.items() if key != "engine"})


def test_schema_names_the_plan_and_refuses_unknown_names():
    assert json.loads(run_cli("schema", "plan").stdout)["title"] == "mambaxfer.plan/v1"
    result = run_cli("schema", "banana")
    assert result.code == 2 and len(messages(result.stderr.strip())) == 1
    assert result.stderr.startswith("error: ") and "plan" in result.stderr
