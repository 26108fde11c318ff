"""preflight's inputs: launch scripts read as a shell reads them (redirections, pipes, background
jobs), JSON flag values bounded (huge integers, deep nesting, dotted forms included), script files
bounded before they are read (devices, FIFOs), and every flag that changes vLLM's answer read as
vLLM's argparse reads it (the option tables in ``mambaxfer_cli/readers/vllm_serve_flags`` are
written from vLLM 0.33.0's and 0.34.0's own parsers by ``scripts/vllm_serve_flags.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import jsonschema
import pytest

from cli_run import assert_user_error, messages, run_cli
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.engines.vllm.preflight.report import preflight
from mambaxfer_cli.readers import documents
from mambaxfer_cli.readers.documents import read_bounded
from mambaxfer_cli.engines.vllm.serve_args import flag_table, parse_serve
from mambaxfer_cli.readers.model_source import load_model
from mambaxfer_cli.schema import document_schema

INPUTS = Path(__file__).parent / "fixtures" / "serve-inputs"
DS = "VLLM_SSM_CONV_STATE_LAYOUT=DS"
P_KV = """--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'"""
D_KV = """--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'"""


def run_json(p: str, d: str, *extra: str):
    result = run_cli("preflight", "--prefill", p, "--decode", d, "--format", "json", *extra)
    assert "Traceback" not in result.stderr, result.stderr
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, document_schema("preflight"))
    return result.code, doc


def assess(p: str, d: str, release: str = "0.34"):
    from dataclasses import replace

    from mambaxfer_cli.engines.vllm.engine import Engines
    from mambaxfer_cli.engines.vllm.geometry import EngineFlags
    from mambaxfer_cli.engines.vllm.releases import release as named

    flags = replace(EngineFlags(), release=named(release))
    return preflight(parse_serve(p), parse_serve(d, "--decode"), load_model, Engines(flags, flags))


def codes(report) -> list[str]:
    return [r.code for r in report.assessment.refusals]


# --- R6: a launch script that redirects its output ------------------------------------------

def test_the_reported_redirecting_script_is_read(tmp_path):
    result = run_cli("preflight", "--prefill-file", str(INPUTS / "redirect-prefill.sh"), "--decode",
                     "vllm serve jamba", "--format", "json")
    assert result.code == 1, result.stderr          # a verdict (no connector), not 'unexpected argument'
    doc = json.loads(result.stdout)
    prefill = doc["engines"]["prefill"]
    assert prefill["command"] == "VLLM_SSM_CONV_STATE_LAYOUT=DS vllm serve jamba --port 8100"
    assert prefill["conv_layout"] == "DS"


@pytest.mark.parametrize("tail", [
    "> server.log 2>&1", "2>&1 | tee server.log", "| tee x", "&", "> log 2>&1 &", "&> log", ">> log",
    "< /dev/null > out 2> err", ">| log", "2>>err.log", "1>out 2>&1 </dev/null &", "|& tee x", ";", "&& echo up",
    "| tee -a 'a b.log' > /dev/null",
])
def test_redirections_pipes_and_jobs_are_not_the_command(tail):
    line = parse_serve(f"{DS} vllm serve jamba -tp 2 {tail}\n")
    assert line.words == ("vllm", "serve", "jamba", "-tp", "2") and line.tp == 2


def test_a_redirection_before_the_command_and_a_quoted_operator():
    line = parse_serve("2>err.log nohup vllm serve jamba --served-model-name 'a>b' \"c|d\" 2 > out &")
    assert line.words == ("vllm", "serve", "jamba", "--served-model-name", "a>b", "c|d", "2")


def test_a_redirection_without_a_target_is_one_user_error():
    with pytest.raises(UserError, match="redirection without a target"):
        parse_serve("vllm serve jamba >")


def test_a_script_that_pipes_into_a_second_vllm_is_two_servers():
    with pytest.raises(UserError, match="twice"):
        parse_serve("vllm serve jamba | vllm serve jamba")


# --- R2: huge integers and deep nesting in JSON flag values -----------------------------------

DIGITS = "9" * 4301        # one past Python's 4300-digit limit on int() of a string


@pytest.mark.parametrize("flag, fragment", [
    (f"--speculative-config '{{\"method\": \"mtp\", \"num_speculative_tokens\": {DIGITS}}}'",
     "--speculative-config holds an integer of 4301 digits"),
    (f"--hf-overrides.num_hidden_layers={DIGITS}", "--hf-overrides.num_hidden_layers holds an integer of 4301 digits"),
    (f"--hf-overrides '{{\"x\": {DIGITS}}}'", "--hf-overrides holds an integer of 4301 digits"),
    ("--hf-overrides.x=" + "[" * 2000, "--hf-overrides.x is nested more than 64 levels deep"),
    ("--hf-overrides '" + "[" * 2000 + "'", "--hf-overrides is nested more than 64 levels deep"),
    ("--kv-transfer-config.a" + ".b" * 100 + "=1", "names keys more than 64 levels deep"),
    ("-tp " + DIGITS, "--tensor-parallel-size expects an integer"),
    (f"--block-size={DIGITS}", "--block-size expects an integer"),
])
def test_huge_or_deep_values_are_one_user_error(tmp_path, flag, fragment):
    script = tmp_path / "prefill.sh"
    script.write_text(f"vllm serve jamba {flag}\n")
    result = run_cli("preflight", "--prefill-file", str(script), "--decode", "vllm serve jamba")
    assert_user_error(result, fragment)
    assert len(messages(result.stderr.strip())) == 1


def test_the_reported_json_reproducers(tmp_path):
    """bigint-prefill.sh and bigint-dotted-prefill.sh as reported; deep-dotted-prefill.sh generated here."""
    deep = tmp_path / "deep-dotted-prefill.sh"
    deep.write_text("vllm serve jamba --hf-overrides.x=" + "[" * 200_000 + "\n")
    for script, fragment in ((INPUTS / "bigint-prefill.sh", "integer of 4301 digits"),
                             (INPUTS / "bigint-dotted-prefill.sh", "integer of 4301 digits"),
                             (deep, "nested more than 64 levels deep")):
        assert_user_error(run_cli("preflight", "--prefill-file", str(script), "--decode", "vllm serve jamba"),
                          fragment)


def test_an_integer_within_the_bound_is_read():
    line = parse_serve("vllm serve jamba --hf-overrides.num_hidden_layers=" + "1" * 40)
    assert line.hf_overrides == {"num_hidden_layers": int("1" * 40)}


# --- R3: files bounded before they are read ----------------------------------------------------

@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_an_endless_device_is_refused_after_its_bound(device):
    if not os.path.exists(device):
        pytest.skip(f"no {device}")
    # The address-space limit stands in for the machine's memory: the old unbounded read died here.
    result = run_cli("preflight", "--prefill-file", device, "--decode", "vllm serve jamba",
                     preexec=lambda: __import__("resource").setrlimit(
                         __import__("resource").RLIMIT_AS, (4 << 30, 4 << 30)))
    assert_user_error(result, f"--prefill-file {device}: larger than 1 MiB")


def test_a_fifo_without_a_writer_is_refused_at_once(tmp_path):
    fifo = tmp_path / "prefill.fifo"
    os.mkfifo(fifo)
    assert_user_error(run_cli("preflight", "--prefill-file", str(fifo), "--decode", "vllm serve jamba"),
                      "a FIFO with no writer")


def test_a_pipe_is_read_to_its_end():
    """A script piped in (``--prefill-file /dev/stdin``, as a shell's <(...) gives one): read to its end."""
    proc = subprocess.run([sys.executable, "-m", "mambaxfer_cli", "preflight", "--prefill-file", "/dev/stdin",
                           "--decode", "vllm serve jamba", "--format", "json"], input="vllm serve jamba -tp 2\n",
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["engines"]["prefill"]["tp"] == 2


def test_read_bounded_waits_for_a_slow_writer_and_gives_up_on_a_silent_one(tmp_path, monkeypatch):
    read_fd, write_fd = os.pipe()
    path = f"/proc/self/fd/{read_fd}"
    if not os.path.exists(path):
        pytest.skip("no /proc/self/fd")
    started = threading.Event()

    def writer() -> None:
        started.wait()
        os.write(write_fd, b"vllm serve jamba\n")
        os.close(write_fd)

    thread = threading.Thread(target=writer)
    thread.start()
    started.set()
    assert read_bounded(path, "pipe", 1 << 20, "a script") == b"vllm serve jamba\n"
    thread.join()
    os.close(read_fd)
    # A writer that stays and sends nothing: refused after INPUT_IDLE_S (made short here).
    read_fd, write_fd = os.pipe()
    monkeypatch.setattr(documents, "INPUT_IDLE_S", 0.05)
    with pytest.raises(UserError, match="no data for 0.05 seconds"):
        read_bounded(f"/proc/self/fd/{read_fd}", "pipe", 1 << 20, "a script")
    os.close(read_fd)
    os.close(write_fd)


def test_read_bounded_refuses_by_size_before_reading(tmp_path):
    big = tmp_path / "big.sh"
    with open(big, "wb") as handle:          # sparse: 2 GiB that take no disk
        handle.truncate(2 << 30)
    with pytest.raises(UserError, match="larger than 1 MiB"):
        read_bounded(big, "--prefill-file big.sh", 1 << 20, "a script")
    assert_user_error(run_cli("preflight", "--prefill-file", str(tmp_path), "--decode", "vllm serve m"),
                      "is a directory")


def test_model_and_plan_paths_share_the_bound(tmp_path):
    fifo = tmp_path / "plan.json"
    os.mkfifo(fifo)
    assert_user_error(run_cli("execute", "--plan", str(fifo), "--device", "cpu"), "a FIFO with no writer")
    assert_user_error(run_cli("execute", "--plan", "/dev/zero", "--device", "cpu"), "larger than 16 MiB")


# --- issue 15 item 5: the flags that change the answer ----------------------------------------

def test_the_flag_tables_are_vllms():
    # Spellings vLLM 0.33's own parser registers (EnableDisableAction adds --disable-x and the hidden
    # --no-enable-x) and 0.34's new flags.
    t33, t34 = flag_table("0.33"), flag_table("0.34")
    assert t33["--no-enable-prefix-caching"][:2] == ("enable_prefix_caching", "false")
    assert "--no-disable-prefix-caching" not in t33
    assert t33["-ac"][0] == "attention_config" and t33["--gdn-prefill-backend"][2] == (
        "flashinfer", "triton", "cutedsl", "aiter_flydsl", "sycl")
    assert t34["--gdn-prefill-backend"][2][-1] == "hip"
    assert t33["--disable-hybrid-kv-cache-manager"][:2] == ("disable_hybrid_kv_cache_manager", "true")
    new = {"--enable-extensible-kv-cache", "--max-num-inflight-kv-loads", "--cache-aware-admission-window",
           "--cache-aware-admission-threshold", "--checkpoint-prepare-on-startup", "--shuffle-safetensors-files"}
    assert new <= set(t34) and not new & set(t33)


def test_attention_config_is_the_attention_backend():
    for flag in ("-ac '{\"backend\": \"flashinfer\"}'", "--attention-config.backend=FLASHINFER",
                 "-ac.backend FLASHINFER", "--attention_config '{\"backend\": \"FLASHINFER\"}'"):
        line = parse_serve(f"vllm serve m {flag}")
        assert line.attention_backend == "FLASHINFER", flag
    assert parse_serve("vllm serve m -ac '{\"backend\": \"auto\"}'").attention_backend is None
    # vLLM's create_engine_config: both given is an error (an 'auto' --attention-backend counts)
    with pytest.raises(UserError, match="mutually exclusive"):
        parse_serve("vllm serve m --attention-backend auto -ac.backend=TRITON_ATTN")


def test_gdn_prefill_backend_from_the_flag_or_additional_config():
    assert parse_serve("vllm serve m --gdn-prefill-backend triton").gdn_prefill_backend == "triton"
    assert parse_serve("vllm serve m --additional-config '{\"gdn_prefill_backend\": \" Triton \"}'"
                       ).gdn_prefill_backend == "triton"         # _resolve_gdn_prefill_backend: strip().lower()
    assert parse_serve("vllm serve m --additional-config.gdn_prefill_backend=flashinfer "
                       "--gdn-prefill-backend triton").gdn_prefill_backend == "triton"   # the flag wins
    assert parse_serve("vllm serve m").gdn_prefill_backend is None
    with pytest.raises(UserError, match="invalid choice 'TRITON'"):          # argparse choices: exact
        parse_serve("vllm serve m --gdn-prefill-backend TRITON")
    hip = parse_serve("vllm serve m --gdn-prefill-backend hip")
    assert hip.gdn_prefill_backend == "hip" and hip.release_only == (("--gdn-prefill-backend hip", ("0.34",)),)


def test_dotted_keys_nest_merge_and_replace_the_whole_value():
    line = parse_serve("vllm serve m --kv-transfer-config '{\"kv_connector\": \"NixlConnector\", \"kv_role\": "
                       "\"kv_both\"}' --kv-transfer-config.kv_buffer_device=cpu "
                       "--kv_transfer_config.kv_connector_extra_config.enforce_handshake_compat=false")
    # FlexibleArgumentParser passes the dotted keys last as one JSON value: the whole one is dropped
    # (checked against vLLM 0.33's parser: kv_connector=None, kv_buffer_device='cpu').
    assert line.kv_transfer == {"kv_buffer_device": "cpu",
                                "kv_connector_extra_config": {"enforce_handshake_compat": False}}
    assert line.kv_connector is None and line.kv_buffer_device == "cpu" and not line.enforce_handshake_compat
    assert any("only the dotted keys" in n for n in line.notes)
    merged = parse_serve("vllm serve m --hf-overrides.a.b [1] --hf-overrides.a.b [2] --hf-overrides.c+ x,y "
                         "--hf-overrides.n=1k --hf-overrides.m=2K --hf_overrides.a_b=3")
    assert merged.hf_overrides == {"a": {"b": [1, 2]}, "c": ["x", "y"], "n": 1000, "m": 2048, "a_b": 3}


def test_enforce_handshake_compat_is_pythons_truth():
    def compat(value: str) -> bool:
        return parse_serve("vllm serve m --kv-transfer-config '{\"kv_connector\": \"NixlConnector\", \"kv_role\": "
                           f"\"kv_both\", \"kv_connector_extra_config\": {{\"enforce_handshake_compat\": {value}}}}}'"
                           ).enforce_handshake_compat
    # get_from_extra_config("enforce_handshake_compat", True) is tested for truth: the string "false" is true
    assert [compat(v) for v in ("false", "0", "null", '""', "true", '"false"')] == [False, False, False, False,
                                                                                   True, True]


def test_abbreviations_and_unknown_flags():
    assert parse_serve("vllm serve m --tensor-parallel 2 --block-siz=32").block_size == 32   # argparse prefixes
    with pytest.raises(UserError, match="ambiguous option: --max"):
        parse_serve("vllm serve m --max 3")
    line = parse_serve("vllm serve m --enable-extensible-kv-cache --max-num-inflight-kv-loads 4 --no-such-flag")
    assert line.unknown == ("--no-such-flag",)
    assert dict(line.release_only) == {"--enable-extensible-kv-cache": ("0.34",),
                                       "--max-num-inflight-kv-loads": ("0.34",)}
    ucx = parse_serve("vllm serve m --kv-transfer-config.kv_connector_extra_config.ucx_backend_params.x=1")
    assert ucx.release_only == (("--kv-transfer-config kv_connector_extra_config.ucx_backend_params", ("0.34",)),)


def test_new_flags_are_known_in_the_report():
    p = f"{DS} vllm serve jamba --block-size 144 --enable-extensible-kv-cache --shuffle-safetensors-files {P_KV}"
    d = f"{DS} vllm serve jamba --block-size 144 --cache-aware-admission-window 8 {D_KV}"
    code, doc = run_json(p, d, "--vllm-version", "0.34")
    assert code == 0 and doc["engines"]["prefill"]["unknown_flags"] == []
    assert "--enable-extensible-kv-cache" in doc["engines"]["prefill"]["ignored_flags"]
    assert not any("known to vLLM 0.34 only" in w for w in doc["warnings"])
    code, doc = run_json(p, d, "--vllm-version", "0.33")
    assert any(w.startswith("P: --enable-extensible-kv-cache is known to vLLM 0.34 only, and this engine runs "
                            "vLLM 0.33") for w in doc["warnings"]), doc["warnings"]
    assert doc["engines"]["decode"]["release_only_flags"] == ["--cache-aware-admission-window (0.34)"]


def test_host_buffer_refuses_different_kernel_blocks():
    # Qwen3.5-0.8B 4P2D, prefix caching off: kernel blocks 272 and 544 tokens (docs/reference.md's
    # formula: 1085440/4 state bytes over 1024 B/token at TP 4, /2 over 1024 at TP 2), which vLLM's
    # handshake accepts (544 is a multiple of 272); a host buffer on D refuses them
    # (base_worker.py _validate_remote_agent_handshake asserts not use_host_buffer).
    p = f"{DS} vllm serve qwen3.5-0.8b -tp 4 --no-enable-prefix-caching {P_KV}"
    d = (f"{DS} vllm serve qwen3.5-0.8b -tp 2 --no-enable-prefix-caching "
         f"--kv-transfer-config.kv_connector=NixlConnector --kv-transfer-config.kv_role=kv_consumer "
         f"--kv-transfer-config.kv_buffer_device=cpu")
    report = assess(p, d, "0.33")     # 0.34's default 64-token blocks give 320 and 576, refused anyway
    geometry = report.assessment.plan.prefill.geometry, report.assessment.plan.decode.geometry
    assert [g.kernel_block_size for g in geometry] == [272, 544]
    assert codes(report) == ["host-buffer"]
    assert report.assessment.refusals[0].message == "Heterogeneous block sizes are not supported with host buffer"
    fix = report.fix
    assert fix is not None and fix.after.works
    assert {c.flag for c in fix.changes} == {"--block-size"}
    after = fix.after.plan.prefill.geometry, fix.after.plan.decode.geometry
    assert after[0].kernel_block_size == after[1].kernel_block_size
    # Without the host buffer the same pairing is accepted.
    assert codes(assess(p, d.replace("--kv-transfer-config.kv_buffer_device=cpu", ""), "0.33")) == []


def test_a_buffer_device_cuda_does_not_take():
    report = assess(f"{DS} vllm serve jamba --block-size 144 {P_KV}",
                    f"{DS} vllm serve jamba --block-size 144 --kv-transfer-config '{{\"kv_connector\": "
                    f"\"NixlConnector\", \"kv_role\": \"kv_consumer\", \"kv_buffer_device\": \"xpu\"}}'")
    assert codes(report) == ["kv-buffer-device"]
    assert report.assessment.refusals[0].message == "D: cuda with xpu kv_buffer is not supported."


def test_skipped_hash_says_what_it_lets_through():
    p = f"{DS} vllm serve jamba --block-size 144 --kv-cache-dtype fp8 {P_KV}"
    d = (f"{DS} vllm serve jamba --block-size 144 --kv-transfer-config '{{\"kv_connector\": \"NixlConnector\", "
         f"\"kv_role\": \"kv_consumer\", \"kv_connector_extra_config\": {{\"enforce_handshake_compat\": false}}}}'")
    hashed = assess(p, d.replace("false", "true"))
    assert codes(hashed)[0] == "compat-hash"
    skipped = assess(p, d)
    assert "compat-hash" not in codes(skipped)
    assert skipped.assessment.let_through == ("KV-cache dtype (P fp8, D auto)",)
    assert any("lets through: KV-cache dtype (P fp8, D auto)" in w for w in skipped.warnings)
    assert skipped.verdict != "works"
    # P's setting does nothing in pull mode: D runs the handshake.
    p_only = assess(p.replace(P_KV, "--kv-transfer-config '{\"kv_connector\": \"NixlConnector\", \"kv_role\": "
                                    "\"kv_producer\", \"kv_connector_extra_config\": {\"enforce_handshake_compat\": "
                                    "false}}'"), d.replace("false", "true"))
    assert "compat-hash" in codes(p_only) and any("no effect on this side" in w for w in p_only.warnings)


def test_same_size_dtypes_are_reinterpreted_not_moved_wrong():
    # float16 and bfloat16 are both 2 bytes: every byte lands where D expects it, every number is wrong.
    report = assess(f"{DS} vllm serve jamba --block-size 144 --mamba-cache-dtype float16 {P_KV}",
                    f"{DS} vllm serve jamba --block-size 144 {D_KV}")
    a = report.assessment
    assert a.byte_check.simulation.ok and a.verdict == "corrupt"
    assert a.reinterpreted[0] == ("conv state", "float16", "bfloat16")
    assert "reads P's float16 values as bfloat16" in report.headline()


@pytest.mark.parametrize("p_env, d_env, expected", [
    # D checks P's advertised layout against its own (pull): any difference, whatever the TP sizes
    ("VLLM_KV_CACHE_LAYOUT=LBNHC", "", "Heterogeneous TP expects same kv_cache_layout (local LBHNC, remote LBNHC)."),
    ("VLLM_KV_CACHE_LAYOUT=NHD", "VLLM_KV_CACHE_LAYOUT=LBNHC", None),     # NHD is LBNHC's old name
    ("VLLM_KV_CACHE_LAYOUT=HND", "", None),                              # HND is LBHNC
    ("VLLM_KV_CACHE_LAYOUT=BLHNC", "VLLM_KV_CACHE_LAYOUT=BLHNC", None),
])
def test_kv_cache_layout_same_tp(p_env, d_env, expected):
    report = assess(f"{p_env} {DS} vllm serve jamba --block-size 144 {P_KV}",
                    f"{d_env} {DS} vllm serve jamba --block-size 144 {D_KV}")
    messages = [r.message for r in report.assessment.refusals]
    if expected is None:
        assert messages == [] and report.verdict == "works"
    else:
        assert messages[0].startswith(expected)
        assert report.fix is not None and report.fix.after.works


def test_kv_cache_layout_across_tp_sizes_needs_contiguous_heads():
    # Nemotron-H-8B has 8 KV heads: at P TP 1 / D TP 2 D splits them, which LBNHC cannot do.
    p, d = (f"VLLM_KV_CACHE_LAYOUT=LBNHC {DS} vllm serve nemotron-h-8b {P_KV}",
            f"VLLM_KV_CACHE_LAYOUT=LBNHC {DS} vllm serve nemotron-h-8b -tp 2 {D_KV}")
    report = assess(p, d)
    assert codes(report) == ["kv-cache-layout-heads"]
    assert report.assessment.refusals[0].message.startswith(
        "Heterogeneous TP head-dimension splitting requires contiguous heads.")
    assert report.fix is not None and report.fix.after.works
    assert {(c.flag, c.new) for c in report.fix.changes} == {("VLLM_KV_CACHE_LAYOUT=", "LBHNC")}
    # BLHNC is block-contiguous: accepted
    assert "kv-cache-layout-heads" not in codes(assess(p.replace("LBNHC", "BLHNC"), d.replace("LBNHC", "BLHNC")))
    # The permute option receives LBHNC into LBNHC, which asserts HMA off: refused on a hybrid
    permuted = assess(p.replace("LBNHC", "LBHNC"), d.replace(D_KV, "--kv-transfer-config '{\"kv_connector\": "
                      "\"NixlConnector\", \"kv_role\": \"kv_consumer\", \"enable_permute_local_kv\": true}'"))
    assert [r.message for r in permuted.assessment.refusals] == ["HMA does not support block size post processing"]


def test_a_layout_a_hybrid_cannot_resolve_stops_the_engine():
    report = assess(f"VLLM_KV_CACHE_LAYOUT=LHBNC {DS} vllm serve jamba --block-size 144 {P_KV}",
                    f"{DS} vllm serve jamba --block-size 144 {D_KV}")
    assert report.assessment.refusals[0].message == (
        "P: VLLM_KV_CACHE_LAYOUT=LHBNC does not satisfy every supported set; valid layouts: "
        "['LBNHC', 'LBHNC', 'BLNHC', 'BLHNC'].")
    bad = assess(f"VLLM_KV_CACHE_LAYOUT=XYZ {DS} vllm serve jamba {P_KV}", f"{DS} vllm serve jamba {D_KV}")
    assert bad.assessment.refusals[0].message.startswith("P: Invalid value 'XYZ' for VLLM_KV_CACHE_LAYOUT.")
    exported = parse_serve("export VLLM_KV_CACHE_LAYOUT=LBNHC\nvllm serve jamba")
    assert exported.kv_cache_layout == "LBNHC" and exported.command().startswith("VLLM_KV_CACHE_LAYOUT=LBNHC ")
    assert "not exported" in parse_serve("VLLM_KV_CACHE_LAYOUT=LBNHC\nvllm serve m").notes[0]


def test_disabling_hma_stops_a_mamba_engine_and_is_hashed():
    report = assess(f"{DS} vllm serve jamba --block-size 144 --disable-hybrid-kv-cache-manager {P_KV}",
                    f"{DS} vllm serve jamba --block-size 144 {D_KV}")
    assert codes(report) == ["hma", "compat-hash"]
    assert "_is_hma_required" in report.assessment.refusals[0].message
    assert "hybrid KV-cache manager off vs on" not in report.assessment.refusals[1].message
    assert "hybrid KV-cache manager on vs off" in report.assessment.refusals[1].message     # D vs P
    assert [(c.side, c.flag, c.new) for c in report.fix.changes] == [
        ("prefill", "--disable-hybrid-kv-cache-manager", None)]
    assert report.fix.after.works
    assert parse_serve("vllm serve m --enable-hybrid-kv-cache-manager").disable_hybrid_kv_cache_manager is False
