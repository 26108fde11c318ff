"""One answer, said the same way: a deployment the engine would not run is a verdict (exit 1)
whatever the reason and whichever command is asked, while input mambaxfer cannot read is exit
2; execute and bench move what the engine moves unless --semantics exact asks for mambaxfer's
plan."""

from __future__ import annotations

import json

import pytest

from cli_run import assert_refused, assert_user_error, run_cli, run_json

LFM2 = {"architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", "hidden_size": 1024, "num_hidden_layers": 4}
CONNECTOR = "its NIXL connector refuses its state"
LAUNCH = "python -m sglang.launch_server --model-path {model} --tp {tp} --disaggregation-mode {mode}"


@pytest.fixture()
def lfm2(tmp_path):
    folder = tmp_path / "lfm2"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LFM2))
    return str(folder)


@pytest.mark.parametrize("args", [
    ("plan", "--p-tp", "1", "--d-tp", "2"),
    ("check", "--max-tp", "2"),
    ("inspect", "--tp", "2"),
], ids=["plan", "check", "inspect"])
def test_a_family_the_connector_refuses_is_a_verdict_not_a_usage_error(lfm2, args):
    command, *rest = args
    assert_refused(run_cli(command, "--model", f"{lfm2}/config.json", *rest), CONNECTOR)


def test_preflight_refuses_lfm2_as_check_does(lfm2):
    result = run_cli("preflight", "--prefill", f"vllm serve {lfm2} -tp 1", "--decode", f"vllm serve {lfm2} -tp 2")
    assert_refused(result, "--prefill:", CONNECTOR)


@pytest.mark.parametrize("args, words", [
    (("check", "--model", "nemotron-h-8b", "--pairs", "3:1"), "vLLM does not start a TP-3 engine"),
    (("plan", "--model", "nemotron-h-8b", "--p-tp", "1", "--d-tp", "3"), "vLLM does not start a TP-3 engine"),
    (("check", "--model", "kimi-linear-48b", "--ssm-dtype", "float16", "--max-tp", "1"),
     "KDA recurrent state supports only auto, float32, and bfloat16"),
    (("check", "--engine", "sglang", "--model", "jamba"), "SGLang 0.5.23 has no Jamba model file"),
    (("plan", "--engine", "sglang", "--model", "nemotron-h-8b", "--p-tp", "3", "--d-tp", "1"),
     "SGLang 0.5.23 cannot serve it at TP 3"),
], ids=["vllm-tp", "vllm-plan-tp", "vllm-kda-dtype", "sglang-family", "sglang-tp"])
def test_every_start_up_refusal_exits_1_for_both_engines(args, words):
    assert_refused(run_cli(*args), words)


def test_sglang_preflight_and_check_agree_on_a_model_sglang_does_not_serve():
    preflight = run_cli("preflight", "--prefill", LAUNCH.format(model="ai21labs/Jamba-v0.1", tp=1, mode="prefill"),
                        "--decode", LAUNCH.format(model="ai21labs/Jamba-v0.1", tp=2, mode="decode"))
    check = run_cli("check", "--engine", "sglang", "--model", "jamba", "--pairs", "1:2")
    assert (preflight.code, check.code) == (1, 1), preflight.stdout + preflight.stderr + check.stderr


@pytest.mark.parametrize("args, words", [
    (("check", "--model", "no-such-model"), "no-such-model"),
    (("plan", "--model", "mamba-130m", "--p-tp", "1", "--d-tp", "2", "--dtype", "int3"), "--dtype"),
], ids=["unknown-model", "bad-value"])
def test_what_mambaxfer_cannot_read_stays_a_usage_error(args, words):
    assert_user_error(run_cli(*args), words)


# --- execute moves what the engine moves -----------------------------------------------------


def execute(*args: str) -> tuple[int, dict]:
    return run_json("execute", "--device", "cpu", "--format", "json", "--timeout", "90", *args)


@pytest.mark.usefixtures("nixl")
def test_execute_under_sglang_moves_sglangs_writes_by_default():
    pairing = ("--engine", "sglang", "--model", "nemotron-h-8b", "--p-tp", "1", "--d-tp", "2")
    code, doc = execute(*pairing)
    assert (code, doc["semantics"], doc["verified"]) == (1, "sglang", False)
    assert doc["bad_bytes"] == doc["predicted_bad_bytes"] > 0      # check --engine sglang's count
    code, doc = execute(*pairing, "--semantics", "exact")
    assert (code, doc["semantics"], doc["verified"]) == (0, "exact", True)


@pytest.mark.usefixtures("nixl")
def test_execute_under_vllm_moves_vllms_reads_by_default_and_says_so():
    pairing = ("--model", "granite-4.0-h-tiny", "--p-tp", "1", "--d-tp", "2", "--layers", "4")
    code, doc = execute(*pairing)
    assert (code, doc["semantics"], doc["verified"]) == (1, "vllm", False)
    assert sum(d["verdict"]["wrong_bytes"] for d in doc["decode"]) > 0
    table = run_cli("execute", "--device", "cpu", "--timeout", "90", *pairing)
    assert table.code == 1 and "vLLM's reads (--semantics vllm)" in " ".join(table.stdout.split())
    code, doc = execute(*pairing, "--semantics", "exact")
    assert (code, doc["semantics"], doc["verified"]) == (0, "exact", True)


# --- the dtypes vLLM takes, in its words -----------------------------------------------------


@pytest.mark.parametrize("flag, serve_flag", [("--dtype", "--dtype"), ("--ssm-dtype", "--mamba-ssm-cache-dtype"),
                                              ("--conv-dtype", "--mamba-cache-dtype")])
def test_every_command_refuses_fp8_state_as_vllms_parser_does(flag, serve_flag):
    served = run_cli("preflight", "--prefill", f"vllm serve nvidia/Nemotron-H-8B-Base-8K {serve_flag} fp8",
                     "--decode", "vllm serve nvidia/Nemotron-H-8B-Base-8K")
    words = " ".join(served.stderr.split()).split(f"{serve_flag}: ", 1)[1]      # vLLM's choices, as preflight says
    assert words.startswith("invalid choice 'fp8' (choose from ")
    for command, *rest in (("plan", "--p-tp", "1", "--d-tp", "1"), ("check", "--pairs", "1:1"), ("inspect",)):
        assert_user_error(run_cli(command, "--model", "nemotron-h-8b", flag, "fp8", *rest), words)


def test_the_dtype_choices_are_each_releases_serve_flags():
    from mambaxfer_cli.engines.vllm.releases import NAMES
    from mambaxfer_cli.engines.vllm.serve_args import flag_table
    from mambaxfer_cli.planning.dtypes import DTYPE_FLAGS

    for release in NAMES:
        for serve_flag, choices in DTYPE_FLAGS.values():
            assert sorted(flag_table(release)[serve_flag][2]) == sorted(choices), (release, serve_flag)


# --- every GPU vLLM runs on, by its nvidia-smi name, with what vLLM does there ------------------


@pytest.mark.parametrize("name, sm", [
    ("NVIDIA GeForce RTX 4090", "8.9"), ("nvidia geforce rtx 3090", "8.6"), ("RTX 4090", "8.9"),
    ("NVIDIA A100-SXM4-80GB", "8.0"), ("NVIDIA H100 80GB HBM3", "9.0"), ("NVIDIA H200", "9.0"), ("B200", "10.0"),
    ("NVIDIA L4", "8.9"), ("NVIDIA L40S", "8.9"), ("NVIDIA A10", "8.6"), ("Tesla T4", "7.5"),
    ("Tesla V100-SXM2-32GB", "7.0"), ("NVIDIA RTX 6000 Ada Generation", "8.9"),
])
def test_a_gpu_is_taken_as_nvidia_smi_prints_it(name, sm):
    from mambaxfer_cli.engines.vllm.gpu import gpu

    assert gpu(name).sm == sm


def test_an_unknown_gpu_is_one_line_saying_how_to_give_it():
    assert_user_error(run_cli("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--gpu", "NVIDIA Foo 9000"),
                      "unknown GPU 'NVIDIA Foo 9000'; give it as nvidia-smi --query-gpu=name prints it")


@pytest.mark.parametrize("gpu", ["sm75", "Tesla T4", "Tesla V100-SXM2-32GB"])
def test_below_sm80_vllm_runs_triton_attention_in_float16(gpu):
    code, doc = run_json("plan", "--model", "nemotron-h-8b", "--p-tp", "1", "--d-tp", "2", "--gpu", gpu,
                         "--format", "json")
    engine = doc["engines"]["decode"]
    assert code == 0 and engine["attention_backend"] == "TRITON_ATTN", engine
    assert doc["model"]["conv_dtype"] == doc["model"]["attention"]["dtype"] == "float16"
    assert_refused(run_cli("plan", "--model", "nemotron-h-8b", "--p-tp", "1", "--d-tp", "2", "--gpu", gpu,
                           "--dtype", "bfloat16"), "Bfloat16 is only supported on GPUs with compute capability of "
                                                   "at least 8.0", "(check_if_supports_dtype)")
    assert_refused(run_cli("plan", "--model", "nemotron-h-8b", "--p-tp", "1", "--d-tp", "2", "--gpu", gpu,
                           "--attention-backend", "FLASH_ATTN"), "['compute capability not supported']")
