"""Fuzzing every way in: mutated model configs (JSON and YAML), option values, plan files for
``execute --plan``, and preflight's serve lines and launch scripts. Whatever the input: exit 0 (or
check's and execute's 1), or exit 2 with one red line; never a traceback or an internal error,
within a time and a memory bound.

The CI run is short; ``FUZZ_EXAMPLES=3000 FUZZ_PREFLIGHT_EXAMPLES=1000 FUZZ_REPORT=fuzz.jsonl pytest
tests/test_fuzz.py`` runs a long one and records every input's outcome (see scripts/fuzz_summary.py).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_run import messages

FIXTURES = Path(__file__).parent / "fixtures" / "hf-configs"
CONFIGS = {p.name: json.loads(p.read_text()) for p in sorted(FIXTURES.glob("*.json"))}
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "120"))
REPORT = os.environ.get("FUZZ_REPORT")
TIME_LIMIT = 20.0                  # CPU seconds an input may use (a hang is anything longer)
RUN_LIMIT = 300.0                  # wall seconds, a ceiling that only catches an input that blocks (a run
                                   # that starts rank processes ends by its own no-progress --timeout)
SIGNAL_EXAMPLES = int(os.environ.get("FUZZ_SIGNAL_EXAMPLES", "8"))
REJECTED_MEMORY = 1 << 30          # peak traced bytes of an input the tool refuses
ACCEPTED_MEMORY = 5 << 30          # check may simulate up to 4 GiB (its own bound)

KEYS = sorted({key for config in CONFIGS.values() for key in config}
              | {"num_hidden_layers", "num_key_value_heads", "num_attention_heads", "num_heads", "head_dim",
                 "n_groups", "state_size", "conv_kernel", "intermediate_size", "hidden_size",
                 "num_speculative_tokens", "hybrid_override_pattern", "layer_types", "layers_block_type",
                 "attn_layer_indices", "attn_layer_period", "attn_layer_offset", "full_attention_interval",
                 "text_config", "model_type", "torch_dtype", "mamba_ssm_dtype"})
BIG = [-(2 ** 63), -1, 0, 1, 2, 3, 7, 2 ** 31, 2 ** 32 + 1, 10 ** 9, 2 ** 63, 2 ** 64, 10 ** 18, 10 ** 30]

ints = st.sampled_from(BIG) | st.integers(-10, 100_000)
scalars = (ints | st.sampled_from([float("nan"), float("inf"), -0.0, 1.5, 1e308, True, False, None, "",
                                   "bfloat16", "torch.float32", "M*-M", "x" * 300])
           | st.text(max_size=12))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)


# --- inputs -------------------------------------------------------------------------------------

@st.composite
def config_bytes(draw) -> tuple[str, bytes]:
    """A real config, mutated: keys set to odd values or dropped, then maybe corrupt bytes."""
    config = json.loads(json.dumps(draw(st.sampled_from(list(CONFIGS.values())))))
    target = config.get("text_config") if isinstance(config.get("text_config"), dict) and draw(st.booleans()) \
        else config
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(KEYS))
        if draw(st.integers(0, 4)) == 0:
            target.pop(key, None)
        else:
            target[key] = draw(values)
    as_yaml = draw(st.integers(0, 3)) == 0
    if as_yaml:
        text = yaml.safe_dump({"name": "fuzzed", "config": config}, allow_unicode=True).encode()
    else:
        text = json.dumps(config).encode()
    text = draw(byte_damage(text))
    return ("model.yaml" if as_yaml else "config.json"), text


@st.composite
def byte_damage(draw, text: bytes) -> bytes:
    kind = draw(st.sampled_from(["none"] * 6 + ["cut", "non-utf8", "digits", "deep", "bomb"]))
    if kind == "cut":
        return text[:draw(st.integers(0, len(text)))]
    if kind == "non-utf8":
        at = draw(st.integers(0, len(text)))
        return text[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00"])) + text[at:]
    if kind == "digits":   # a 5,000-digit integer where a number was
        return text.replace(b": 1", b": " + b"9" * 5000, 1).replace(b": 2", b": " + b"8" * 5000, 1)
    if kind == "deep":
        depth = draw(st.sampled_from([100, 1000, 100_000]))
        return b'{"config": ' + b"[" * depth + b"]" * depth + b', "model_type": "mamba"}'
    if kind == "bomb":     # nested YAML aliases: 580 bytes that stand for 9^12 strings
        lines = ['config: {model_type: mamba}', 'a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
        lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 12)]
        return "\n".join(lines).encode()
    return text


MODELS = ["jamba", "mamba-130m", "qwen3.5-0.8b", "granite-4.0-h-tiny"]
TEXTS = ["", "abc", "-1", "0", "1", "3", "1e3", "nan", "inf", "-inf", "9" * 40, "9" * 5000, "1,2", "1:2",
         "ssm*7,attention", "ssm*99999999999", "attention", "1;2;3", "3,5;1", "x" * 5000, "\u00ff"]
OPTIONS = {   # the options each command takes, and what to feed them
    "common": ["--p-tp", "--d-tp", "--num-spec", "--p-num-blocks", "--d-num-blocks", "--p-blocks-per-logical",
               "--d-blocks-per-logical", "--attention-streams", "--attention-backend", "--block-size",
               "--kv-cache-dtype", "--kv-heads", "--head-size", "--p-block-size", "--kv-groups", "--kv-tensors",
               "--ssm-tensors",
               "--request-blocks", "--prefill-blocks", "--decode-blocks", "--seed", "--conv-dtype",
               "--ssm-dtype", "--variant", "--semantics", "--model"],
    "plan": ["--d-rank", "--output", "--format"],
    "check": ["--max-tp", "--pairs", "--junit", "--format"],
    "inspect": ["--tp", "--model", "--num-spec", "--conv-dtype", "--variant"],
    "execute": ["--timeout", "--host", "--port", "--iters", "--layers", "--blocks", "--block-size",
                "--request-blocks", "--p-tp", "--d-tp", "--model", "--seed", "--semantics"],
    "bench": ["--request-blocks", "--iters", "--device", "--timeout", "--semantics", "--chart", "--layers",
              "--block-size", "--seed", "--format", "--p-tp", "--d-tp", "--model", "--kv-cache-dtype",
              "--attention-backend", "--variant"],
}


@st.composite
def option_value(draw) -> str:
    return draw(st.sampled_from(TEXTS) | st.sampled_from(BIG).map(str) | st.integers(-3, 300).map(str)
                | st.sampled_from(["/dev/null/x", "/nonexistent/x.json", ".", "x" * 300 + ".json",
                                   "256.1.1.1", "no-such-host.invalid", "8.8.8.8", "::1"]))


@st.composite
def option_case(draw) -> list[str]:
    command = draw(st.sampled_from(["plan", "check", "inspect", "execute", "bench"]))
    model = draw(st.sampled_from(MODELS))
    base = {"plan": ["plan", "--model", model, "--p-tp", "1", "--d-tp", "2"],
            "check": ["check", "--model", model, "--pairs", "1:2"],
            "inspect": ["inspect", "--model", model],
            # a run that the drawn option does not stop is real: keep it small
            "execute": ["execute", "--model", model, "--p-tp", "1", "--d-tp", "2", "--layers", "4",
                        "--device", "cpu", "--iters", "1"],
            "bench": ["bench", "--model", model, "--p-tp", "1", "--d-tp", "1", "--layers", "2", "--request-blocks",
                      "1", "--iters", "1", "--device", "cpu", "--format", "json"]}[command]
    names = OPTIONS[command] + (OPTIONS["common"] if command in ("plan", "check") else [])
    argv = list(base)
    for _ in range(draw(st.integers(1, 2))):
        argv += [draw(st.sampled_from(names)), draw(option_value())]
    return argv


def plan_document(fmt: str) -> bytes:
    from mambaxfer_cli.cli.options import Format, dump
    from mambaxfer_cli.engines.vllm.transfer.plan_source import plan_to_execute
    from mambaxfer_cli.execute.tasks import cut_layers
    from mambaxfer_cli.readers.model_source import load_model

    plan = plan_to_execute(cut_layers(load_model("jamba"), 4), 1, 2, semantics="exact", coalesce=False,
                           blocks=None, request_blocks=1, seed=0)
    return dump(plan.to_dict(), Format(fmt)).encode()


PLAN_DOCS = {}


def _nodes(document, path=()):
    yield path
    children = document.items() if isinstance(document, dict) else enumerate(document) \
        if isinstance(document, list) else ()
    for key, child in children:
        yield from _nodes(child, (*path, key))


@st.composite
def plan_file(draw) -> tuple[str, bytes]:
    fmt = draw(st.sampled_from(["json", "yaml"]))
    if fmt not in PLAN_DOCS:
        PLAN_DOCS[fmt] = plan_document(fmt)
    document = json.loads(json.dumps(yaml.safe_load(PLAN_DOCS[fmt])))
    paths = list(_nodes(document))[1:]
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths))
        parent = document
        try:
            for key in path[:-1]:
                parent = parent[key]
            if draw(st.integers(0, 4)) == 0 and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = draw(values)
        except (KeyError, IndexError, TypeError):
            continue
    text = (yaml.safe_dump(document) if fmt == "yaml" else json.dumps(document)).encode()
    return f"plan.{fmt}", draw(byte_damage(text))


@st.composite
def cases(draw) -> dict:
    kind = draw(st.sampled_from(["config", "config", "options", "options", "plan-file"]))
    files = {}
    if kind == "config":
        name, data = draw(config_bytes())
        files[name] = data
        argv = draw(st.sampled_from([["inspect", "--model", name, "--tp", "1,2"],
                                     ["plan", "--model", name, "--p-tp", "1", "--d-tp", "2"],
                                     ["plan", "--model", name, "--p-tp", "2", "--d-tp", "1", "-f", "json"],
                                     ["check", "--model", name, "--pairs", "1:2"]]))
    elif kind == "options":
        argv = draw(option_case())
    else:
        name, data = draw(plan_file())
        files[name] = data
        argv = ["execute", "--plan", name, "--device", "cpu", "--timeout", "15"]
    return {"kind": kind, "argv": argv, "files": {k: base64.b64encode(v).decode() for k, v in files.items()},
            "timeout": TIME_LIMIT + 5, "wall": RUN_LIMIT}


# --- preflight: serve lines and launch scripts ------------------------------------------------

SCRIPTS = {p.name: p.read_text()
           for p in sorted((Path(__file__).parent.parent / "examples" / "preflight").glob("*.sh"))}
PREFLIGHT_EXAMPLES = int(os.environ.get("FUZZ_PREFLIGHT_EXAMPLES", str(max(EXAMPLES // 3, 30))))
SERVE_MODELS = ["jamba", "mamba-130m", "qwen3.5-0.8b", "granite-4.0-h-tiny", "nemotron-h-8b", "Qwen/Qwen3.5-0.8B",
                "config.json", "no/such-model", "./x.yaml"]
KV_CONFIG = {"P": """--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'""",
             "D": """--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'"""}
DIGITS = "9" * 5000
SERVE_PIECES = [   # shell-quoted flags: the ones that change the answer, their odd values, and plain junk
    "-tp 2", "-tp 4", "--tensor-parallel-size=8", "-tp 3", "-tp 0", "-tp -1", f"-tp {DIGITS}", "--tensor-parallel 2",
    "--block-size 144", "--block_size=32", "--block-siz 64", "--block-size 0", f"--block-size={DIGITS}",
    "--dtype float32", "--dtype half", "--dtype bogus", "--kv-cache-dtype fp8", "--kv-cache-dtype nope",
    "--mamba-ssm-cache-dtype float32", "--mamba-cache-dtype float16", "--mamba-cache-dtype float32",
    "--no-enable-prefix-caching", "--enable-prefix-caching", "--disable-prefix-caching",
    "--no-disable-prefix-caching", "--enable-prefix-caching=yes",
    "--attention-backend FLASHINFER", "--attention-backend auto", "--attention-backend TRITON_ATTN",
    """-ac '{"backend": "TRITON_ATTN"}'""", "--attention-config.backend=FLASHINFER", "-ac.backend auto",
    "-ac '[1]'", """-ac '{"backend": 3}'""", "--attention_config.backend FLASH_ATTN",
    "--gdn-prefill-backend triton", "--gdn-prefill-backend hip", "--gdn-prefill-backend TRITON",
    """--additional-config '{"gdn_prefill_backend": "triton"}'""", "--additional-config.gdn_prefill_backend=7",
    "--additional-config '[]'",
    "--kv-transfer-config.kv_buffer_device=cpu", "--kv-transfer-config.kv_buffer_device=xpu",
    "--kv-transfer-config.kv_buffer_device=[1]",
    "--kv-transfer-config.kv_connector_extra_config.enforce_handshake_compat=false",
    """--kv-transfer-config.kv_connector_extra_config.enforce_handshake_compat='"false"'""",
    "--kv-transfer-config.kv_connector_extra_config=3", "--kv-transfer-config.enable_permute_local_kv=true",
    "--kv-transfer-config.enable_permute_local_kv=maybe", "--kv-transfer-config.kv_role=kv_both",
    "--kv-transfer-config.kv_connector=NixlPushConnector", "--kv-transfer-config.kv_connector=LMCacheConnector",
    "--disable-hybrid-kv-cache-manager", "--enable-hybrid-kv-cache-manager",
    "--enable-extensible-kv-cache", "--disable-extensible-kv-cache", "--max-num-inflight-kv-loads 4",
    "--cache-aware-admission-window 8", "--cache-aware-admission-threshold 0.5", "--checkpoint-prepare-on-startup",
    "--shuffle-safetensors-files", "--kv-transfer-config.kv_connector_extra_config.ucx_backend_params.x=1",
    """--speculative-config '{"method": "mtp", "num_speculative_tokens": 2}'""",
    "--speculative-config.num_speculative_tokens=1", f"--speculative-config.num_speculative_tokens={DIGITS}",
    f"""--speculative-config '{{"method": "mtp", "num_speculative_tokens": {DIGITS}}}'""",
    f"--hf-overrides.num_hidden_layers={DIGITS}", "--hf-overrides.num_hidden_layers=2k",
    "--hf-overrides.x=" + "[" * 100, "--hf-overrides.x=" + "[" * 5000, "--hf-overrides '" + "[" * 3000 + "'",
    "--hf-overrides '" + '{"a":' * 70 + "1" + "}" * 70 + "'", "--hf-overrides.a" + ".b" * 80 + "=1",
    "--hf-overrides.c+ x,y", """--hf-overrides '{"num_key_value_heads": 3}'""",
    "--max 3", "--no-such-flag 3", "--served-model-name a b", "--config cfg.yaml", "-O3", "-O", "-O 2", "--",
    "-", "--port", "--hf-token", "--model other", "extra-positional",
]
ANSWER_PIECES = [   # valid flags that change vLLM's answer, drawn most often so verdicts get explored
    "-tp 2", "-tp 4", "--block-size 144", "--block-size 64", "--mamba-ssm-cache-dtype float32",
    "--mamba-cache-dtype float16", "--no-enable-prefix-caching", "--attention-backend FLASHINFER",
    """-ac '{"backend": "TRITON_ATTN"}'""", "--gdn-prefill-backend triton", "--kv-cache-dtype fp8",
    "--kv-transfer-config.kv_buffer_device=cpu", "--disable-hybrid-kv-cache-manager",
    "--kv-transfer-config.kv_connector_extra_config.enforce_handshake_compat=false",
    """--speculative-config '{"method": "mtp", "num_speculative_tokens": 1}'""", "--enable-extensible-kv-cache",
]
SERVE_ENV = ["VLLM_SSM_CONV_STATE_LAYOUT=DS", "VLLM_SSM_CONV_STATE_LAYOUT=SD", "VLLM_SSM_CONV_STATE_LAYOUT=XX",
             "VLLM_KV_CACHE_LAYOUT=LBNHC", "VLLM_KV_CACHE_LAYOUT=LHBNC", "VLLM_KV_CACHE_LAYOUT=NHD",
             "VLLM_KV_CACHE_LAYOUT=BLHNC", "VLLM_KV_CACHE_LAYOUT=junk", "CUDA_VISIBLE_DEVICES=0,1", "X="]
SHELL_TAILS = ["> server.log 2>&1", "2>&1 | tee server.log", "| tee x", "&", "> log 2>&1 &", "&> log", ">",
               "2>", "| vllm serve jamba", "; echo done", "<<EOF", "'unclosed", '"unclosed', "\\", "# comment",
               "< /dev/null", ">&2", "|| exit 1", "&& wait", "(", ")"]


def serve_piece():
    return st.one_of(st.sampled_from(ANSWER_PIECES), st.sampled_from(ANSWER_PIECES), st.sampled_from(ANSWER_PIECES),
                     st.sampled_from(SERVE_PIECES))


@st.composite
def serve_line(draw, side: str) -> str:
    """A vllm serve line: a model, the side's connector or not, flags drawn from SERVE_PIECES, maybe
    environment prefixes and a shell tail, maybe a word dropped, doubled or swapped."""
    words = ["vllm", "serve", draw(st.sampled_from(SERVE_MODELS[:6] * 3 + SERVE_MODELS[6:]))]
    if draw(st.integers(0, 3)):
        words.append(KV_CONFIG[side])
    words += draw(st.lists(serve_piece(), max_size=4))
    env = (["VLLM_SSM_CONV_STATE_LAYOUT=DS"] if draw(st.booleans()) else []) + draw(
        st.lists(st.sampled_from(SERVE_ENV), max_size=2))
    tail = draw(st.lists(st.sampled_from(SHELL_TAILS), max_size=1)) if draw(st.integers(0, 2)) == 0 else []
    if draw(st.integers(0, 5)) == 0 and len(words) > 3:
        i, j = draw(st.integers(0, len(words) - 1)), draw(st.integers(0, len(words) - 1))
        op = draw(st.sampled_from(["drop", "double", "swap"]))
        if op == "drop":
            words.pop(i)
        elif op == "double":
            words.insert(i, words[i])
        else:
            words[i], words[j] = words[j], words[i]
    return " ".join(env + words + tail)


@st.composite
def launch_script(draw, side: str) -> bytes:
    """A real launch script from examples/preflight, or a drawn line in one; flags inserted into its
    vllm serve line, shell tails appended, then maybe damaged bytes or binary junk."""
    kind = draw(st.sampled_from(["example", "example", "line", "junk"]))
    if kind == "junk":
        return draw(st.binary(max_size=300))
    if kind == "line":
        text = f"#!/usr/bin/env bash\nexport VLLM_SSM_CONV_STATE_LAYOUT=DS\n{draw(serve_line(side))}\n"
    else:
        text = SCRIPTS[draw(st.sampled_from(sorted(SCRIPTS)))]
        pieces = " ".join(draw(st.lists(serve_piece(), max_size=3)))
        text = text.replace(" --port", f" {pieces} --port", 1)
        tail = " ".join(draw(st.lists(st.sampled_from(SHELL_TAILS), max_size=2)))
        text = text.rstrip("\n") + (f" {tail}" if tail else "") + "\n"
    return draw(byte_damage(text.encode()))


@st.composite
def preflight_cases(draw) -> dict:
    files, argv = {}, ["preflight"]
    for side, name in (("P", "prefill"), ("D", "decode")):
        if draw(st.booleans()):
            files[f"{name}.sh"] = draw(launch_script(side))
            argv += [f"--{name}-file", f"{name}.sh"]
        else:
            argv += [f"--{name}", draw(serve_line(side))]
    if "config.json" in " ".join(argv) or draw(st.integers(0, 5)) == 0:
        files["config.json"] = json.dumps(CONFIGS[draw(st.sampled_from(sorted(CONFIGS)))]).encode()
    argv += draw(st.sampled_from([[], ["--format", "json"], ["-f", "yaml"], ["--junit", "out.xml"]]))
    return {"kind": "preflight", "argv": argv, "files": {k: base64.b64encode(v).decode() for k, v in files.items()},
            "timeout": TIME_LIMIT + 5, "wall": RUN_LIMIT}


# --- the worker ---------------------------------------------------------------------------------

class Worker:
    def __init__(self) -> None:
        self.process = None

    def start(self) -> None:
        env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).parent.parent), str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
        self.process = subprocess.Popen([sys.executable, str(Path(__file__).parent / "fuzz_worker.py")],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def run(self, case: dict) -> dict:
        if self.process is None or self.process.poll() is not None:
            self.start()
        self.process.stdin.write(json.dumps(case) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            code = self.process.wait()
            self.process = None
            return {"code": None, "hang": False, "died": code, "seconds": 0, "cpu_seconds": 0, "peak_bytes": 0,
                    "stdout": "", "stderr": f"the worker died ({code})"}
        return json.loads(line)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stdin.close()
            self.process.wait(10)


@pytest.fixture(scope="module")
def worker():
    w = Worker()
    yield w
    w.stop()


def _record(case: dict, result: dict) -> None:
    if REPORT:
        row = {"kind": case["kind"], "argv": [a[:60] for a in case["argv"]], "code": result["code"],
               "hang": result["hang"], "seconds": result["seconds"], "peak_bytes": result["peak_bytes"],
               "traceback": "Traceback" in result["stderr"], "stderr": result["stderr"][-300:]}
        with open(REPORT, "a") as handle:
            handle.write(json.dumps(row) + "\n")


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(case=cases())
def test_no_input_ends_in_a_traceback_a_hang_or_a_memory_blow_up(worker, case):
    check_outcome(worker, case)


@settings(max_examples=PREFLIGHT_EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(case=preflight_cases())
def test_no_serve_line_or_script_ends_in_a_traceback_a_hang_or_a_memory_blow_up(worker, case):
    """preflight's inputs: mutated real lines and launch scripts, the flags that change the answer,
    huge and deep JSON (dotted forms too), redirections and binary junk: a verdict (0, 1) or one
    line (2), never more."""
    check_outcome(worker, case)


def check_outcome(worker, case: dict) -> None:
    result = worker.run(case)
    _record(case, result)
    shown = f"{case['argv']} -> {result}"
    assert not result["hang"], f"hung past {case['timeout']} CPU s or {case['wall']} s: {shown}"
    assert result["cpu_seconds"] < TIME_LIMIT, shown
    assert "Traceback" not in result["stderr"], shown
    # 1: a verdict, or the engine's start-up refusal from any command that answers for a deployment
    allowed = {0, 1, 2} if case["argv"][0] in ("check", "execute", "bench", "preflight", "plan", "inspect") \
        else {0, 2}
    if case["argv"][0] in ("execute", "bench"):
        allowed.add(3)   # a run that started and could not complete (its own one line)
    assert result["code"] in allowed, shown
    refusal = result["code"] == 1 and result["stdout"] == "" and result["stderr"].startswith("error: ")
    if result["code"] in (2, 3) or refusal:
        lines = [line for line in messages(result["stderr"]) if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), shown
        assert result["peak_bytes"] < REJECTED_MEMORY, shown
    else:
        assert result["peak_bytes"] < ACCEPTED_MEMORY, shown


# --- signals at any moment of a run ---------------------------------------------------------------

SIGNALS = {signal.SIGINT: "interrupted", signal.SIGTERM: "stopped by SIGTERM", signal.SIGHUP: "stopped by SIGHUP"}
RUNS = {   # small runs vLLM accepts (bench's five layers hold Jamba's first attention layer: no warning),
    # and states their ranks surely pass through (rank, a fragment of its state line)
    "execute": (["execute", "--model", "jamba", "--layers", "4", "--p-tp", "2", "--d-tp", "2", "--device", "cpu",
                 "--iters", "3", "--format", "json"],
                [("P0", "loading NIXL"), ("P1", "filling"), ("P0", "serving"), ("D0", "poisoning"),
                 ("D1", "exchanging"), ("D0", "preparing"), ("D1", "waiting for every D rank"),
                 ("D0", "transferring"), ("D1", "verifying")]),
    "bench": (["bench", "--model", "jamba", "--layers", "5", "--p-tp", "2", "--d-tp", "1", "--request-blocks", "1,2",
               "--iters", "2", "--device", "cpu", "--format", "json"],
              [("P1", "filling"), ("D0", "registering"), ("P0", "waiting for the D ranks to register"),
               ("D0", "READ planned"), ("P1", "WRITE coalesced"), ("D0", "verifying"),
               ("D0", "waiting for every rank at 'WRITE:limit:checked'")]),
}


@st.composite
def signal_cases(draw) -> dict:
    command = draw(st.sampled_from(sorted(RUNS)))
    states = RUNS[command][1]
    moment = draw(st.one_of(st.tuples(st.just("after"), st.floats(0, 4)),
                            st.tuples(st.just("state"), st.sampled_from(states))))
    return {"command": command, "signum": draw(st.sampled_from(sorted(SIGNALS))), "moment": moment,
            "to_group": draw(st.booleans())}


def _handled(pid: int) -> bool:
    """mambaxfer's entry point installed its handlers (Python handles SIGINT from its own start,
    SIGHUP only once mambaxfer does)."""
    try:
        status = open(f"/proc/{pid}/status").read()
    except OSError:
        return False
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(mask >> (signal.SIGHUP - 1) & 1)


@settings(max_examples=SIGNAL_EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=signal_cases())
def test_a_signal_at_any_moment_of_a_run_is_its_code_and_one_line(nixl, tmp_path_factory, case):
    """Ctrl-C (to the process group, as a terminal sends it), SIGTERM or SIGHUP at a drawn moment
    of execute or bench: a time after the command started, or the moment a rank reaches a drawn
    state. The command ends with 128 + the signal and exactly its one line (no NIXL or UCX line,
    no traceback), or, when the signal came after the run's end, as the run ends; no rank is left."""
    from rank_processes import PROGRESS_LOG, as_a_shell_starts, assert_no_rank_left, new_tag, reached

    log = tmp_path_factory.mktemp("signal") / "progress.log"
    argv, _ = RUNS[case["command"]]
    env = {**os.environ, **new_tag(), PROGRESS_LOG: str(log), "COLUMNS": "80"}
    proc = subprocess.Popen([sys.executable, "-m", "mambaxfer_cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
                            preexec_fn=as_a_shell_starts)
    try:
        while proc.poll() is None and not _handled(proc.pid):
            time.sleep(0.0005)
        kind, value = case["moment"]
        if kind == "after":
            time.sleep(value)
        else:
            while proc.poll() is None and not reached(log, *value):
                time.sleep(0.005)
        if proc.poll() is None:
            os.killpg(proc.pid, case["signum"]) if case["to_group"] else proc.send_signal(case["signum"])
        out, err = proc.communicate(timeout=RUN_LIMIT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    shown = f"{case} -> {proc.returncode}: {err!r}"
    if REPORT:
        with open(REPORT, "a") as handle:
            handle.write(json.dumps({"kind": "signal", **case, "code": proc.returncode, "stderr": err[-300:]}) + "\n")
    if proc.returncode == 0:          # the run ended before the signal came
        assert err == "" and json.loads(out)["schema"].startswith("mambaxfer."), shown
    else:
        assert proc.returncode == 128 + case["signum"], shown
        assert err.splitlines() == [SIGNALS[case["signum"]]], shown
    assert_no_rank_left(env)
