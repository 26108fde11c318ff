"""The plan command end to end: tables, documents, schema validity and user errors."""

from __future__ import annotations

import json

import jsonschema
import pytest

from cli_run import assert_refused, assert_user_error, run_cli
from mambaxfer_cli.schema import document_schema

VALIDATOR = jsonschema.Draft202012Validator(document_schema("plan"))


def plan_json(*args: str) -> dict:
    result = run_cli("plan", *args, "--format", "json")
    assert result.code == 0, result.stderr
    document = json.loads(result.stdout)
    VALIDATOR.validate(document)
    return document


def test_schema_command_prints_a_valid_json_schema():
    result = run_cli("schema", "plan")
    assert result.code == 0
    schema = json.loads(result.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["schema"] == {"const": "mambaxfer.plan/v1"}


def test_show_all_renders_every_section():
    result = run_cli("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "4", "--show", "all",
                     "--vllm-version", "0.33")
    assert result.code == 0, result.stderr
    for section in ("tp_ratio 4", "Prefill (P) TP 1", "Decode (D) TP 4", "Reads (bytes within", "Where every byte",
                    "Descriptor IDs", "step 100000", "vLLM 0.33 accepts this pairing and issues the same reads",
                    "vLLM does not compare"):
        assert section in result.stdout, section
    assert "more: --show" not in result.stdout


def test_the_brief_form_gives_the_verdict_both_engines_and_the_reads_first():
    result = run_cli("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "4", "--vllm-version", "0.33")
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "vLLM 0.33 accepts this pairing and issues the same reads"
    assert any(line.startswith("│ P FLASH_ATTN · block 80 tokens") for line in lines)
    assert any(line.startswith("│ D FLASH_ATTN · block 80 tokens") for line in lines)
    # jamba 1P4D: D rank r holds 2048 of the 8192 channels: x is 2048 x 3 conv rows x 2 bytes = 12288 B,
    # ssm 2048 x d_state 16 x 2 bytes (bfloat16) = 65536 B, both read from P0
    assert "  D3 ← P0: x 12288 B, ssm 65536 B" in lines
    for hidden in ("Prefill (P) TP 1", "Descriptor IDs", "Where every byte", "vLLM does not compare"):
        assert hidden not in result.stdout
    assert lines[-1] == "more: --show layouts,reads,diagram,ids,notes (or --show all)"
    assert len(lines) < 30
    some = run_cli("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "4", "--show", "ids, layouts")
    assert "Descriptor IDs" in some.stdout and "Decode (D) TP 4" in some.stdout and "Reads (bytes" not in some.stdout
    assert some.stdout.splitlines()[-1] == "more: --show reads,diagram,notes (or --show all)"


@pytest.mark.parametrize("value", ["bogus", "ids,bogus", ","])
def test_show_names_the_sections_it_knows(value):
    assert_user_error(run_cli("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "4", "--show", value),
                      "--show", "layouts, reads, diagram, ids, notes or all")


def test_output_says_the_verdict_and_the_warnings(tmp_path):
    target = tmp_path / "plan.json"
    result = run_cli("plan", "--model", "granite-4.0-h-tiny", "--p-tp", "1", "--d-tp", "2", "--output", str(target),
                     "--vllm-version", "0.33")
    assert result.code == 0 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "vLLM 0.33 accepts this pairing but its reads corrupt the state (see the warnings)",
        f"wrote {target}: 2 reads, 2 descriptor reads, 1 warning: vllm-differs"]
def test_the_first_line_and_the_header_name_the_release_and_the_gpu():
    result = run_cli("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "4", "--vllm-version", "0.34",
                     "--show", "all")
    assert result.code == 0, result.stderr
    for section in ("tp_ratio 4", "Prefill (P) TP 1", "Decode (D) TP 4", "Reads", "Where every byte",
                    "Descriptor IDs", "step 100000", "vLLM 0.34 accepts this pairing and issues the same reads",
                    "vLLM 0.34 on H100 (SM 9.0, CUDA 13)"):
        assert section in result.stdout, section


@pytest.mark.parametrize("model,p,d,extra", [
    ("jamba", 1, 4, []), ("jamba", 4, 1, []), ("nemotron-h-8b", 1, 2, []), ("qwen3.5-0.8b", 2, 1, []),
    ("granite-4.0-h-tiny", 1, 2, ["--semantics", "vllm"]), ("mamba-130m", 2, 3, []),
    ("mamba-codestral-7b", 8, 2, ["--coalesce"]), ("qwen3-next-80b", 4, 8, ["--attention-streams", "2"]),
])
def test_documents_validate_against_the_published_schema(model, p, d, extra):
    document = plan_json("--model", model, "--p-tp", str(p), "--d-tp", str(d), *extra)
    assert document["prefill"]["tp"] == p and document["decode"]["tp"] == d
    assert {r["d_rank"] for r in document["reads"]} == set(range(d))


def test_vllm_semantics_on_replicated_groups_warns_and_exact_does_not():
    vllm = plan_json("--model", "granite-4.0-h-tiny", "--p-tp", "1", "--d-tp", "2", "--semantics", "vllm")
    assert [w["code"] for w in vllm["warnings"]] == ["vllm-replicated-groups"]
    assert "D1 B[0:128] <- P0 C[0:128]" in vllm["warnings"][0]["message"]
    exact = plan_json("--model", "granite-4.0-h-tiny", "--p-tp", "1", "--d-tp", "2")
    assert [w["code"] for w in exact["warnings"]] == ["vllm-differs"]
    # Exact: both D ranks read the one B/C group whole from P0's B and C.
    for read in exact["reads"]:
        by_region = {s["region"]: s for s in read["segments"]}
        assert by_region["B"]["remote_offset"] == 18432 and by_region["C"]["remote_offset"] == 19200


def test_table_marks_the_vllm_misreads():
    result = run_cli("plan", "--model", "granite-4.0-h-tiny", "--p-tp", "1", "--d-tp", "2", "--semantics", "vllm")
    assert result.code == 0
    assert "✗ gets C[0:128] as B[0:128]" in result.stdout
    assert "vllm-replicated-groups" in result.stdout


def test_non_multiple_pairing_is_planned_exactly_and_flagged():
    document = plan_json("--model", "mamba-130m", "--p-tp", "2", "--d-tp", "3")
    assert document["tp_ratio"] is None
    assert [w["code"] for w in document["warnings"]] == ["vllm-refuses"]
    # the TP sizes first; mamba-130m has no attention layers, so vLLM would refuse it at any TP sizes
    assert [r["code"] for r in document["vllm"]["refusals"]] == ["tp-sizes", "no-attention"]
    assert [(r["d_rank"], r["p_rank"]) for r in document["reads"]] == [(0, 0), (1, 0), (1, 1), (2, 1)]


def test_coalesce_merges_a_homogeneous_pairing_into_one_segment():
    document = plan_json("--model", "jamba", "--p-tp", "2", "--d-tp", "2", "--coalesce")
    for read in document["reads"]:
        assert len(read["segments"]) == 1
        assert read["segments"][0]["region"] == "x+ssm"
        assert read["segments"][0]["size"] == document["decode"]["ranks"][0]["conv_bytes"] + \
            document["decode"]["ranks"][0]["ssm_bytes"]
    result = run_cli("plan", "--model", "jamba", "--p-tp", "2", "--d-tp", "2", "--coalesce")
    assert "4 segments → 2" in result.stdout and "saves" in result.stdout


def test_d_rank_limits_the_document():
    document = plan_json("--model", "jamba", "--p-tp", "4", "--d-tp", "2", "--d-rank", "1")
    assert [r["rank"] for r in document["decode"]["ranks"]] == [1]
    assert {r["d_rank"] for r in document["reads"]} == {1}
    assert {r["d_rank"] for r in document["descriptors"]["reads"]} == {1}
    assert [r["p_rank"] for r in document["reads"]] == [2, 3]


def test_explicit_request_blocks_give_exact_ids():
    # Jamba: F = 4 streams, N = 100000; FLASHINFER splits vLLM 0.33's 80-token block into 5 kernel
    # blocks of 16, so L = 20000; k = 2, S = 4. Eight groups (ssm*7, attention), each with its own
    # block on each side.
    document = plan_json("--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--attention-backend", "FLASHINFER",
                         "--vllm-version", "0.33",
                         "--prefill-blocks", "8;1;2;3;4;5;6;9", "--decode-blocks", "3;10;11;12;13;14;15;16")
    assert document["engines"]["prefill"]["blocks_per_logical"] == 5
    read = document["descriptors"]["reads"][0]
    ssm_ids = read["remote_ids"][:8]
    assert ssm_ids == [400000 + q * 20000 + 8 for q in range(8)]
    assert read["local_ids"][:8] == [400000 + q * 20000 + 3 for q in range(8)]
    # The attention group (last) expands logical block 9 to kernel blocks 45..49, per stream.
    assert read["remote_ids"][-20:] == [f * 100000 + kb for f in range(4) for kb in range(45, 50)]


def test_one_block_list_for_several_groups_is_refused_by_plan_and_check():
    # Every group reading block 3 would put several layers' state in one page.
    for command in (("plan", "--p-tp", "1", "--d-tp", "2"), ("check", "--pairs", "1:2")):
        result = run_cli(*command, "--model", "jamba", "--prefill-blocks", "3")
        assert_user_error(result, "--prefill-blocks: block 3 is in groups 0 and 1")


def test_output_writes_the_document(tmp_path):
    target = tmp_path / "plan.json"
    result = run_cli("plan", "--model", "qwen3.5-0.8b", "--p-tp", "2", "--d-tp", "1", "--output", str(target))
    assert result.code == 0, result.stderr
    VALIDATOR.validate(json.loads(target.read_text()))
    yaml_target = tmp_path / "plan.yaml"
    assert run_cli("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "2", "--format", "yaml",
                   "-o", str(yaml_target)).code == 0
    assert yaml_target.read_text().startswith("schema: mambaxfer.plan/v1")


@pytest.mark.parametrize("args,fragments", [
    (["--model", "mamba-130m", "--p-tp", "2", "--d-tp", "3", "--semantics", "vllm"],
     ["vLLM needs one TP size to divide the other", "--semantics exact"]),
    (["--model", "jamba", "--p-tp", "1", "--d-tp", "3"], ["32 attention heads do not divide by TP 3"]),
    (["--model", "granite-4.0-h-tiny", "--p-tp", "1", "--d-tp", "8"],
     ["vLLM does not start a TP-8 engine", "12 attention heads", "verify_with_parallel_config"]),
    (["--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--gdn-prefill-backend", "hip"],
     ["--gdn-prefill-backend: GDN prefill backend 'hip' is not one for NVIDIA GPUs"]),
    (["--model", "granite-4.0-h-tiny", "--p-tp", "2", "--d-tp", "3"], ["4 KV heads"]),
])
def test_what_vllm_does_not_start_is_one_line_and_exit_1(args, fragments):
    assert_refused(run_cli("plan", *args), *fragments)


@pytest.mark.parametrize("args,fragments", [
    (["--model", "jamba", "--p-tp", "0", "--d-tp", "1"], ["--p-tp must be >= 1, got 0"]),
    (["--model", "jamba", "--p-tp", "1", "--d-tp", "1000"],
     ["--d-tp 1000 is larger than any deployment's TP size; at most 256"]),
    (["--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--p-num-blocks", "2000000000000000000"],
     ["--p-num-blocks 2000000000000000000 is larger than any GPU's kernel blocks"]),
    (["--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--seed", "-1"], ["--seed must be >= 0, got -1"]),
    (["--model", "jamba", "--p-tp", "1", "--d-tp", "4", "--d-rank", "4"], ["--d-rank 4 is not a D rank"]),
    (["--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--prefill-blocks", "1,2;3"],
     ["--prefill-blocks gives 2 groups, the model has 8"]),
    (["--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--decode-blocks", "x"], ["--decode-blocks: 'x'"]),
    (["--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--prefill-blocks", "99999999"],
     ["outside the prefill engine's 100000 logical blocks"]),
    (["--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--p-blocks-per-logical", "3", "--vllm-version", "0.33"],
     ["3 kernel blocks per logical block do not divide the block of 80 tokens"]),
    (["--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--attention-backend", "XFORMERS"],
     ["unknown attention backend 'XFORMERS'"]),
    (["--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--kv-cache-dtype", "int3"], ["unknown KV-cache dtype 'int3'"]),
    (["--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--block-size", "0"], ["--block-size must be >= 1, got 0"]),
    (["--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--vllm-version", "0.35"],
     ["--vllm-version 0.35: unknown vLLM release '0.35'; mambaxfer knows 0.33, 0.34"]),
    (["--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--d-vllm-version", "x"], ["--d-vllm-version x: unknown"]),
    (["--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--gpu", "P100"], ["--gpu: unknown GPU 'P100'"]),
    (["--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--attention-streams", "3"], ["--attention-streams"]),
    (["--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--kv-groups", "ssm*2,banana", "--kv-tensors", "2"],
     ["--kv-groups: bad item 'banana'"]),
    (["--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--kv-tensors", "2"], ["only apply with --kv-groups"]),
])
def test_user_errors_are_one_line_and_exit_2(args, fragments):
    assert_user_error(run_cli("plan", *args), *fragments)


def test_output_into_a_missing_directory_writes_nothing(tmp_path):
    target = tmp_path / "missing" / "plan.json"
    assert_user_error(run_cli("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "2", "-o", str(target)),
                      "does not exist")
    assert not target.exists()


def test_kv_groups_override_changes_the_ids():
    document = plan_json("--model", "mamba-130m", "--p-tp", "1", "--d-tp", "1",
                         "--kv-groups", "ssm*2", "--kv-tensors", "12")
    assert document["descriptors"]["groups"] == ["ssm", "ssm"]
    assert document["descriptors"]["decode"]["tensors"] == 12
    assert document["descriptors"]["decode"]["ssm_descs"] == 12 * 2 * 100000   # SSM-only: a block is a page


@pytest.mark.parametrize("args, codes", [
    (("--model", "qwen3.8-flash-next", "--p-tp", "1", "--d-tp", "2"), ["csa-linear-tp"]),
    (("--model", "qwen3.8-flash-next", "--p-tp", "1", "--d-tp", "1", "--num-spec", "5"), ["qsa-ring", "qsa-ring"]),
    (("--model", "kimi-linear-48b", "--p-tp", "1", "--d-tp", "2"), ["prefix-caching"]),
    (("--model", "kimi-linear-48b", "--p-tp", "2", "--d-tp", "1", "--no-enable-prefix-caching", "--show", "all"), []),
])
def test_the_json_of_mla_and_qwen4exp_plans_is_valid(args, codes):
    """Their refusal codes, MLA backends and MLA attention are in the published schema (plan_json
    validates every document)."""
    document = plan_json(*args)
    assert [r["code"] for r in document["vllm"]["refusals"]] == codes
    if "kimi-linear-48b" in args:
        assert document["model"]["attention"]["mla"] is True
        assert document["engines"]["decode"]["attention_backend"] == "FLASH_ATTN_MLA"


def test_every_verdict_code_the_vllm_rules_give_is_published():
    """Each ``Refusal("code", ...)`` of vLLM's plan rules (engines/vllm, its preflight aside: preflight
    speaks of two command lines) is one of VERDICT_CODES, which the plan and execute schemas list, as
    they list the attention backends mambaxfer knows."""
    import re
    from pathlib import Path

    from mambaxfer_cli.engines.vllm.release import VERDICT_CODES

    root = Path(__file__).resolve().parents[1] / "mambaxfer_cli" / "engines" / "vllm"
    given = {code for path in root.rglob("*.py") if "preflight" not in path.relative_to(root).parts
             for code in re.findall(r'Refusal\("([a-z-]+)"', path.read_text())}
    assert given and given <= set(VERDICT_CODES), sorted(given - set(VERDICT_CODES))
    from mambaxfer_cli.engines.vllm.geometry import BACKENDS, MLA_BACKENDS, SPARSE_MLA_BACKENDS
    from mambaxfer_cli.schema import document_schema

    for name in ("plan", "execute"):
        verdict = document_schema(name)["properties"]["vllm"]["properties"]
        assert verdict["refusals"]["items"]["properties"]["code"]["enum"] == list(VERDICT_CODES), name
    backend = document_schema("plan")["$defs"]["Geometry"]["properties"]["attention_backend"]["enum"]
    from mambaxfer_cli.engines.vllm.families.qwen4exp import QSA_BACKEND   # a family's own, whatever the flag

    assert backend == [*BACKENDS, *MLA_BACKENDS, *SPARSE_MLA_BACKENDS, QSA_BACKEND.name]


def test_speculative_tokens_warn_that_draft_layers_are_not_planned():
    """vLLM puts a drafter's attention layers in the target's KV-cache groups (docs/reference.md,
    section 4); the plan has the target's layers only, and says so when speculative tokens are set."""
    def codes(*extra: str) -> list[str]:
        document = plan_json("--model", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "2", *extra)
        return [w["code"] for w in document["warnings"]]

    assert "draft-layers" not in codes()
    assert "draft-layers" in codes("--num-spec", "1")
    document = plan_json("--model", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "2", "--num-spec", "2")
    message = next(w["message"] for w in document["warnings"] if w["code"] == "draft-layers")
    assert message.startswith("speculative decoding (2 tokens on P, 2 on D): where a model drafts them")
    assert "is_draft layers" in message and "descriptor IDs differ" in message
