"""The SGLang conformance probe: SGLang 0.5.23's own functions against mambaxfer's SGLang rules.

The project's test environment has no SGLang: the tests that need it run SGLang's interpreter
(given in MAMBAXFER_TEST_SGLANG_0_5_23, which ``.ci/sglang-env`` creates) in a subprocess. In CI
(CI=true) a missing interpreter fails those tests; elsewhere they skip.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from cli_run import assert_user_error, messages, run_cli
from mambaxfer_cli import __version__
from mambaxfer_cli.conformance.report import AGREES, DIFFERS, NOT_CALLED
from mambaxfer_cli.engines.sglang.conformance import IMPORT_STEP, SOURCES, STEPS, probe, served_presets
from mambaxfer_cli.schema import document_schema

VARIABLE = "MAMBAXFER_TEST_SGLANG_0_5_23"
ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 1800      # a generous bound for a stuck interpreter, never a speed requirement


def sglang_python() -> str:
    path = os.environ.get(VARIABLE, "")
    if path and Path(path).is_file():
        return path
    message = f"{VARIABLE} does not name a Python with SGLang 0.5.23 installed (got {path!r})"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {message}: .ci/sglang-env creates it", pytrace=False)
    pytest.skip(message)


def run_in_sglang(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    # This checkout's mambaxfer first, whatever the environment has installed.
    # One torch thread: the probe's tensors are small, and a shared machine pays for idle spinning.
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {}),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sglang_python(), "-W", "ignore", *args], capture_output=True, text=True,
                          timeout=TIMEOUT, env=env, cwd=ROOT)


def one_off_probe(function: str, ids: str, preset: str, more: str = "") -> str:
    """A probe, run in SGLang's environment, printing per function the outcome and cases of ``preset``
    as is and with ``function``'s layer ids property ``ids`` planted one off (``more``: extra lines)."""
    return f"""
import json
from mambaxfer_cli.engines.sglang import conformance as c
from mambaxfer_cli.engines.sglang.conformance import served_model

base = c.load_functions()
real = base[{function!r}]
class OneOff(real):
    {ids} = property(lambda self: [i + 1 for i in real.{ids}.fget(self)])
out = {{}}
for label, functions in (("as is", base), ("planted", {{**base, {function!r}: OneOff}})):
    report = c.probe([served_model({preset!r})], functions, max_tp=2)
    out[label] = {{r.name: [r.outcome, r.cases] for r in report.results}}
{more}
print(json.dumps(out))
"""


def test_without_sglang_every_function_could_not_be_called():
    # This environment has no SGLang: the probe says so per function and never passes.
    functions = {name: "ModuleNotFoundError: No module named 'sglang'" for name in SOURCES}
    report = probe(served_presets(), functions)
    assert {r.outcome for r in report.results} == {NOT_CALLED} and not report.ok and report.exit_code == 1
    reason = report.to_dict()["functions"][0]["could_not_be_called"]
    assert reason["reason"].startswith("ModuleNotFoundError") and reason["attribute"] is None


# --- the command, in SGLang's environment -----------------------------------------------------------

@pytest.fixture(scope="module")
def all_presets(tmp_path_factory) -> dict:
    """``conformance --engine sglang --all-presets --format json --junit`` in SGLang's
    environment, as a user runs it (its wall time kept: the figure docs/conformance.md gives)."""
    junit = tmp_path_factory.mktemp("sglang-conformance") / "junit.xml"
    started = time.monotonic()
    proc = run_in_sglang("-m", "mambaxfer_cli", "conformance", "--engine", "sglang", "--all-presets",
                         "--format", "json", "--junit", str(junit))
    seconds = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"document": json.loads(proc.stdout), "junit": junit.read_text(), "stderr": proc.stderr,
            "seconds": seconds}


def test_sglang_agrees_on_every_function(all_presets):
    document = all_presets["document"]
    assert document["schema"] == "mambaxfer.conformance/v1" and document["engine"] == "sglang"
    assert document["producer"] == f"mambaxfer {__version__}"
    assert document["sglang"] == {"version": "0.5.23", "rules": "SGLang 0.5.23"} and "vllm" not in document
    assert document["models"] == [m.name for m in served_presets()]
    assert document["max_tp"] == 8 and document["notes"] == []
    outcomes = {f["function"]: (f["outcome"], f["cases"]) for f in document["functions"]}
    assert list(outcomes) == list(SOURCES)
    for name, (outcome, cases) in outcomes.items():
        assert outcome == AGREES, next(f for f in document["functions"] if f["function"] == name)
        assert cases > 0, name
    assert document["ok"] is True
    jsonschema.Draft202012Validator(document_schema("conformance")).validate(document)
    print(f"conformance --engine sglang --all-presets: {all_presets['seconds']:.1f} s wall, "
          f"{document['seconds']:.1f} s comparing")


def test_every_model_is_compared_by_the_functions_that_take_one(all_presets):
    document = all_presets["document"]
    by_model = {f["function"]: f["by_model"] for f in document["functions"]}
    for name in ("compute_mamba_state_slice_blocks", "NIXL state send", "Mooncake state send",
                 "MambaPool transfer entries", "mambaish_config state layers"):
        # JetNemotron runs at TP 1 only: no pairing of two TP sizes slices its state.
        one_tp = {"jet-nemotron-2b"} if name == "compute_mamba_state_slice_blocks" else set()
        assert set(by_model[name]) == set(document["models"]) - one_tp, name
        assert all(counts["cases"] > 0 and counts["differing"] == 0 for counts in by_model[name].values())


def test_the_mtp_drafts_pool_is_compared_on_each_model_sglang_drafts_from_its_own_checkpoint(all_presets):
    by_model = next(f["by_model"] for f in all_presets["document"]["functions"]
                    if f["function"] == "draft KV pool entries")
    assert {"qwen3.5-0.8b", "qwen3-next-80b", "nemotron-h-8b", "qwen3.8-flash-next"} <= set(by_model)
    assert all(counts["cases"] > 0 and counts["differing"] == 0 for counts in by_model.values())


def test_progress_goes_to_stderr_step_by_step(all_presets):
    lines = [line for line in all_presets["stderr"].splitlines() if line.startswith("conformance: ")]
    assert lines[0] == f"conformance: {IMPORT_STEP}, then {len(STEPS)} steps of comparison"
    assert [line.split(" done (")[0] for line in lines[1:]] == [f"conformance: {s}" for s in (IMPORT_STEP, *STEPS)]
    # SGLang's warnings about the dtypes the probe gives it on purpose are not the user's business.
    assert "Invalid mamba_ssm_dtype" not in all_presets["stderr"]


def test_junit_has_one_passing_case_per_function(all_presets):
    root = ET.fromstring(all_presets["junit"])
    cases = root.findall(".//testcase")
    assert [c.get("name") for c in cases] == list(SOURCES)
    assert root.get("failures") == "0" and all(c.find("failure") is None for c in cases)
    assert {c.get("classname") for c in cases} == {"mambaxfer.conformance.sglang-0.5.23"}


# In SGLang's interpreter: the CLI in this process (SGLang imported once), each run's exit code,
# stdout and stderr; a run may plant faults in SGLang's functions first, as a fault in SGLang would.
CLI_RUNS = r"""
import contextlib, io, json, sys
from mambaxfer_cli.cli import run
from mambaxfer_cli.engines.sglang import conformance as c

load = c.load_functions

def shifted_start(fn):
    return lambda *a, **k: [(s + 1, d, n) for s, d, n in fn(*a, **k)]

def extra_draft_layer(cls):
    # The draft's pool one layer deeper than the MTP draft class SGLang builds.
    return lambda **k: cls(**{**k, "layer_num": k["layer_num"] + 1})

def changed_signature(fn):
    def call(*a, **k):
        raise TypeError("compute_head_slice_params() takes 4 positional arguments but 5 were given")
    return call

PLANTS = {"compute_mamba_state_slice_blocks": shifted_start, "compute_head_slice_params": changed_signature}
results = []
for args, planted in json.loads(sys.argv[1]):
    def planted_load(names=tuple(c.SOURCES), planted=planted):
        functions = load(names)
        for name in planted:
            functions[name] = PLANTS[name](functions[name])
        return functions
    c.load_functions = planted_load
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(args)
    results.append({"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
print(json.dumps(results))
"""

GRANITE = ["--model", "granite-4.0-h-tiny", "--max-tp", "2"]
PLANTED = ["compute_mamba_state_slice_blocks", "compute_head_slice_params"]


@pytest.fixture(scope="module")
def cli_runs() -> dict:
    runs = {"table": (["conformance", "--engine", "sglang", "--all-presets"], []),
            "planted": (["conformance", "--engine", "sglang", *GRANITE], PLANTED),
            "planted json": (["conformance", "--engine", "sglang", *GRANITE, "--format", "json"], PLANTED),
            "bailing": (["conformance", "--engine", "sglang", "--model", str(FIXTURES / "bailing-v3.example.json"),
                         "--max-tp", "2", "--format", "json"], []),
            "draft model": (["conformance", "--engine", "sglang", "--model", "qwen3.5-0.8b", "--speculative-algorithm",
                             "EAGLE3", "--draft-model", EAGLE3, "--max-tp", "2", "--format", "json"], [])}
    proc = run_in_sglang("-c", CLI_RUNS, json.dumps(list(runs.values())), env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(zip(runs, json.loads(proc.stdout.strip().splitlines()[-1])))


def _as_documented(text: str) -> list[str]:
    """Output as documented: no trailing spaces, the run's duration left out."""
    return [re.sub(r" in \d+\.\d s:", " in N s:", line.rstrip()) for line in text.strip().splitlines()]


def test_the_documented_output_is_what_sglang_prints(cli_runs):
    table = cli_runs["table"]
    assert table["code"] == 0, table["stderr"][-3000:]
    assert max(len(line) for line in table["stdout"].splitlines()) <= 80
    page = (ROOT / "docs" / "conformance.md").read_text()
    documented = page.split("<!-- sglang-conformance-output -->\n```text\n", 1)[1].split("\n```", 1)[0]
    assert _as_documented(table["stdout"]) == _as_documented(documented)


def test_a_planted_fault_fails_the_command_naming_the_function(cli_runs):
    planted = cli_runs["planted"]
    assert planted["code"] == 1, planted["stderr"][-3000:]
    text = planted["stdout"]
    assert max(len(line) for line in text.splitlines()) <= 80
    rows = {line.split("│")[1].strip(): line.split("│")[3].strip() for line in text.splitlines()
            if line.startswith("│") and line.count("│") == 4}
    assert rows["compute_mamba_state_slice_blocks"].startswith("✗ differs")
    assert rows["compute_head_slice_params"] == "! could not be called"
    assert {o for name, o in rows.items() if name not in PLANTED} == {"✓ agrees"}
    assert "✗ compute_mamba_state_slice_blocks" in text and "SGLang:" in text and "mambaxfer:" in text
    words = " ".join(text.split())
    assert "compute_head_slice_params() takes 4 positional arguments" in words
    assert f"{len(SOURCES)} functions" in words
    assert f"{len(SOURCES) - 2} agree, 1 differ, 1 could not be called" in words


def test_a_planted_fault_is_in_the_document_with_both_values(cli_runs):
    planted = cli_runs["planted json"]
    assert planted["code"] == 1, planted["stderr"][-3000:]
    document = json.loads(planted["stdout"])
    jsonschema.Draft202012Validator(document_schema("conformance")).validate(document)
    functions = {f["function"]: f for f in document["functions"]}
    first = functions["compute_mamba_state_slice_blocks"]["first_difference"]
    assert document["ok"] is False and first["inputs"]["model"] == "granite-4.0-h-tiny"
    # --max-tp 2 reaches the probe: a D rank of each pairing of TP 1 and 2, 1 + 2 + 1 + 2 of them.
    assert document["max_tp"] == 2 and functions["_resolve_rank_mapping"]["cases"] == 6
    # The plant shifts every block's start by one: SGLang's blocks are ours, one later.
    assert [[s + 1, d, n] for s, d, n in first["mambaxfer"]] == first["sglang"]
    reason = functions["compute_head_slice_params"]["could_not_be_called"]["reason"]
    assert reason.startswith("TypeError: compute_head_slice_params()")


# --- the command's refusals, in this environment (no SGLang) -------------------------------------------

def _sglang_importable() -> bool:
    probe = subprocess.run([sys.executable, "-c", "import importlib.util as u; print(u.find_spec('sglang'))"],
                           capture_output=True, text=True, timeout=60)
    return probe.stdout.strip() != "None"


def test_without_sglang_one_line_saying_where_to_run_it():
    if _sglang_importable():
        pytest.skip("SGLang is installed in the test environment")
    result = run_cli("conformance", "--engine", "sglang", "--all-presets")
    assert_user_error(result, "no SGLang is installed", "pip install torch==2.14.1 torchvision==0.29.1 sglang==0.5.23",
                      "pip install --no-deps -e . from your mambaxfer clone", "docs/conformance.md")
    assert len(messages(result.stderr.strip())) == 1 and not result.stdout
    module = subprocess.run([sys.executable, "-m", "mambaxfer_cli.engines.sglang.conformance"], capture_output=True,
                            text=True, timeout=120)
    assert module.returncode == 2 and module.stdout == "" and "no SGLang is installed" in module.stderr


@pytest.mark.parametrize("args, fragments", [
    (("--model", "jamba"), ("--model jamba: SGLang 0.5.23 has no Jamba model file", "the presets SGLang serves",
                            "nemotron-h-8b")),
    ((), ("give --model M or --all-presets",)),
    (("--all-presets", "--max-tp", "0"), ("--max-tp must be >= 1",)),
    (("--all-presets", "--max-tp", "65"), ("--max-tp 65",)),
])
def test_usage_errors_are_one_line(args, fragments):
    result = run_cli("conformance", "--engine", "sglang", *args)
    assert_user_error(result, *fragments)
    assert len(messages(result.stderr.strip())) == 1 and not result.stdout


def test_an_unknown_engine_is_one_line():
    assert_user_error(run_cli("conformance", "--engine", "nope", "--all-presets"), "unknown serving engine 'nope'",
                      "mambaxfer knows sglang, vllm")


# --- the view, by itself -------------------------------------------------------------------------------

def _synthetic_report():
    from mambaxfer_cli.engines.sglang.conformance import FunctionResult, Report

    agreeing = FunctionResult("Mamba2StateShape.create")
    agreeing.record({"model": "nemotron-h-8b", "tp": 1}, (1, 2), (1, 2))
    sends = FunctionResult("NIXL state send")
    writes = tuple(("conv", layer, 0, 0, 4096 * i, 4096 * i, 4096) for layer in (0, 1) for i in range(40))
    moved = writes[:57] + (("conv", 1, 0, 0, 4096 * 17, 4096 * 18, 4096),) + writes[58:]
    sends.record({"model": "nemotron-h-8b", "p_tp": 1, "d_tp": 2, "layers": (0, 1)}, (moved, 4096), (writes, 0))
    broken = FunctionResult("compute_head_slice_params")
    broken.could_not_call(AttributeError("'SimpleNamespace' object has no attribute 'attn_cp_size'",
                                         name="attn_cp_size"))
    return Report("0.5.23", "SGLang 0.5.23", ["nemotron-h-8b"], 8, [agreeing, sends, broken], 1.5, ["a note"])


def test_the_report_renders_within_80_columns_from_where_the_values_part():
    from rich.console import Console

    from mambaxfer_cli.render.console import fit_all
    from mambaxfer_cli.engines.sglang.views.conformance import render_report

    console = Console(width=80, record=True, highlight=False)
    for part in render_report(_synthetic_report()):
        console.print(fit_all([part], console)[0])
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    words = " ".join(text.split())
    for whole in ("✗ differs (1)", "! could not be called", "the attribute: attn_cp_size",
                  "nemotron-h-8b, P TP 1, D TP 2, layers [0, 1]", "the values first part at [0][57]",
                  'SGLang: ["conv", 1, 0, 0, 69632, 73728, 4096]', 'mambaxfer: ["conv", 1, 0, 0, 69632, 69632, 4096]',
                  "differing cases by model: nemotron-h-8b 1/1", "note: a note",
                  "3 functions, 2 cases, 1 model up to TP 8 in 1.5 s: 1 agree, 1 differ, 1 could not be called"):
        assert whole in words, whole


def test_the_synthetic_report_follows_the_schema_and_its_junit_fails_the_right_cases():
    from mambaxfer_cli.engines.sglang.views.conformance import junit_xml

    report = _synthetic_report()
    document = report.to_dict()
    assert report.exit_code == 1 and document["engine"] == "sglang"
    jsonschema.Draft202012Validator(document_schema("conformance")).validate(document)
    assert [f["outcome"] for f in document["functions"]] == [AGREES, DIFFERS, NOT_CALLED]
    assert document["functions"][2]["could_not_be_called"]["attribute"] == "attn_cp_size"
    cases = ET.fromstring(junit_xml(report)).findall(".//testcase")
    assert [c.find("failure") is not None for c in cases] == [False, True, True]


def test_the_schema_keeps_each_engine_to_its_own_document():
    validator = jsonschema.Draft202012Validator(document_schema("conformance"))
    document = _synthetic_report().to_dict()
    as_vllm = {k: v for k, v in document.items() if k != "engine"}      # no engine: vLLM's document
    assert not validator.is_valid(as_vllm)
    mixed = {**document, "vllm": {"version": "0.34.0", "rules": "0.34", "gpu": "H100"}}
    assert not validator.is_valid(mixed)


# A KDA mixer whose conv channels come out rolled by one (a planted fault; GLM-5-Next's test too).
ROLLED_KDA = r"""
def rolled_kda_channels(cls):
    def build(*a, **k):
        attention = cls(*a, **k)
        weight = attention.qkv_conv1d.weight
        load = weight.weight_loader
        def loader(param, loaded, shard):
            load(param, loaded, shard)
            param.data.copy_(param.data.roll(1, 0))
        weight.weight_loader = loader
        return attention
    return build
"""

# Faults planted in SGLang's functions, inside SGLang's environment: each must make its function
# (and only the functions built on it) differ.
PLANT = r"""
import json
from mambaxfer_cli.engines.sglang import conformance as c

base = c.load_functions()

def shifted_start(fn):
    return lambda *a, **k: [(s + 1, d, n) for s, d, n in fn(*a, **k)]

def one_row(fn):
    return lambda **k: fn(**{**k, "outer_count": 1})

def always_writes(fn):
    return lambda **k: True

def swapped_ranks(fn):
    return lambda s, d, sr, dr, h: fn(s, d, dr, sr, h)

def no_shard_groups(fn):
    return lambda **k: fn(**{**k, "conv_shard_groups": None})

def longer_kernel(key):
    return lambda fn: (lambda **k: fn(**{**k, key: k.get(key, 4) + 1}))

def config_ignored(fn):
    return lambda config=None: fn(None)

def one_response(fn):
    def resolve(manager, info):
        fn(manager, info)
        info.required_prefill_response_num = 1
    return resolve

def flat_outer_counts(cls):
    class Pool(cls):
        def get_state_slice_outer_counts(self):
            return [1 for _ in super().get_state_slice_outer_counts()]
    return Pool

def rolled_conv_channels(cls):
    def build(*a, **k):
        mixer = cls(*a, **k)
        load = mixer.conv1d.bias.weight_loader
        def loader(param, weight):
            load(param, weight)
            param.data.copy_(param.data.roll(1))
        mixer.conv1d.bias.weight_loader = loader
        return mixer
    return build

""" + ROLLED_KDA + r"""
def untransposed(fn):
    # Kimi's conv laid out as Mamba2's, (dim, K-1) sliced on its first axis.
    import dataclasses
    def call(**k):
        shape = fn(**k)
        return dataclasses.replace(shape, conv=[(c[1], c[0]) for c in shape.conv], conv_slice_axis=0)
    return call

def rolled_gdn_channels(cls):
    def build(*a, **k):
        mixer = cls(*a, **k)
        load = mixer.conv1d.weight.weight_loader
        def loader(param, weight):
            load(param, weight)
            param.data.copy_(param.data.roll(1, 0))
        mixer.conv1d.weight.weight_loader = loader
        return mixer
    return build

def attention_as_conv(cls):
    # LFM2's attention layers kept as short-conv state layers.
    class Config(cls):
        @property
        def linear_layer_ids(self):
            return list(range(self.num_hidden_layers))
    return Config

def rolled_short_conv(cls):
    def build(*a, **k):
        mixer = cls(*a, **k)
        load = mixer.conv_weight.weight_loader
        def loader(param, weight):
            load(param, weight)
            param.data.copy_(param.data.roll(1, 0))
        mixer.conv_weight.weight_loader = loader
        return mixer
    return build

def unsharded_projection(cls):
    # JetBlock's projection left whole on every rank: its split would fit at any TP size.
    def build(*a, **k):
        mixer = cls(*a, **k)
        mixer.qkvabz_proj.output_size_per_partition = 2 * (mixer.total_k_dim + mixer.total_v_dim + mixer.num_heads)
        return mixer
    return build

def next_slot(cls):
    # The sliced send writes the request's state into the next decode slot.
    from types import SimpleNamespace
    def call(self, *a):
        a = list(a)
        a[6] = [a[6][0] + 1]
        return cls._send_mamba_state_slice(self, *a)
    return SimpleNamespace(_send_mamba_state=cls._send_mamba_state, _send_mamba_state_slice=call)

def shorter_window(cls):
    # The PLE window one row short.
    def build(**k):
        channels, rows = k["state_shape"]
        return cls(**{**k, "state_shape": (channels, rows - 1)})
    return build

def lightning_one_off(cls):
    # MiniCPM-SALA's lightning layers numbered one past SGLang's.
    class Config(cls):
        lightning_layer_ids = property(lambda self: [i + 1 for i in cls.lightning_layer_ids.fget(self)])
    return Config

def cca_one_off(cls):
    # Zaya's CCA layers one past SGLang's (a zaya_layers list led by an MoE layer): a subclass of the
    # config class would not run its __init__ under transformers.
    def build(**k):
        n = k["num_hidden_layers"]
        return cls(**k, zaya_layers=[16, *["a", 16] * (n // 2)][:n])
    build.model_type = cls.model_type
    return build

def renumbered(fn):
    # The state layers numbered 0, 1, 2, ... among themselves, as mambaxfer once did.
    from types import SimpleNamespace
    def call(model_config):
        layers = fn(model_config).mamba2_cache_params.layers
        return SimpleNamespace(mamba2_cache_params=SimpleNamespace(layers=list(range(len(layers)))))
    return call

def extra_draft_layer(cls):
    # The draft's pool one layer deeper than the MTP draft class SGLang builds.
    return lambda **k: cls(**{**k, "layer_num": k["layer_num"] + 1})

def with_rope(cls):
    # The latent with a rope part of 64, as Kimi's keeps: every page 64 elements a token longer.
    return lambda **k: cls(**{**k, "qk_rope_head_dim": 64, "kv_cache_dim": k["kv_cache_dim"] + 64})

def uncompressed_pages(cls):
    # The compressed keys' item a full-KV page of keys, the compress ratio left out.
    class Pool(cls):
        def get_qsa_compressed_state_buf_infos(self):
            return self._get_paged_state_buf_infos(self.qsa_compressed_k_buffer_pool,
                                                   self.qsa_compressed_page_size * self.qsa_compress_ratio)
    return Pool

def every_writer(cls):
    # Mooncake's QSA send without its election: every prefill rank of a group writes the states.
    from unittest import mock
    import sglang.srt.disaggregation.mooncake.conn as conn
    class Manager(cls):
        def maybe_send_extra(self, *a, **k):
            with mock.patch.object(conn, "should_send_replicated_state", lambda **_: True):
                return cls.maybe_send_extra(self, *a, **k)
    return Manager

def changed_signature(fn):
    def call(*a, **k):
        raise TypeError("compute_head_slice_params() takes 4 positional arguments but 5 were given")
    return call

faults = {
    "compute_mamba_state_slice_blocks": shifted_start,
    "compute_mamba_state_slice_byte_blocks": one_row,
    "should_send_replicated_state": always_writes,
    "compute_head_slice_params": swapped_ranks,
    "Mamba2StateShape.create": no_shard_groups,
    "Mamba2StateShape.create_full_rank": longer_kernel("conv_kernel"),
    "KimiLinearStateShape.create": longer_kernel("conv_kernel_size"),
    "mamba2_state_dtype": config_ignored,
    "_resolve_rank_mapping": one_response,
    "MambaPool transfer entries": flat_outer_counts,
    "ShortConvPool and NGramPool entries": shorter_window,
    "mambaish_config state layers": renumbered,
    "MambaMixer2 conv channels": rolled_conv_channels,
    "KimiDeltaAttention conv channels": rolled_kda_channels,
    "Glm5NextLinearAttention conv channels": rolled_kda_channels,
    "untransposed Kimi conv": untransposed,
    "Qwen3GatedDeltaNet conv channels": rolled_gdn_channels,
    "short-conv config state": attention_as_conv,
    "Lfm2ShortConv conv channels": rolled_short_conv,
    "JetNemotronConfig state": attention_as_conv,
    "JetBlock TP sizes": unsharded_projection,
    "MiniCPMHybridConfig state": lightning_one_off,
    "ZayaConfig state": cca_one_off,
    "NIXL state send": next_slot,
    "Mooncake state send": next_slot,
    "draft KV pool entries": extra_draft_layer,
    "DSATokenToKVPool entries": with_rope,
    "QSATokenToKVPool entries": uncompressed_pages,
    "Mooncake QSA state send": every_writer,
    "changed signature": changed_signature,
}
# The smallest preset of each kind is enough to show each fault (odd shapes are stand-ins).
models = [m for m in c.served_presets()
          if m.name in ("granite-4.0-h-tiny", "mamba-130m", "qwen3.5-0.8b", "kimi-linear-48b", "gigachat3.5",
                        "lfm2-1.2b", "glm-5-next", "jet-nemotron-2b")]
target = {"changed signature": "compute_head_slice_params", "untransposed Kimi conv": "KimiLinearStateShape.create"}
# A family's own config class (and the QSA send) is shown on its own preset alone.
alone = {"MiniCPMHybridConfig state": [c.served_model("minicpm-sala")],
         "ZayaConfig state": [c.served_model("zaya1-8b")],
         "Mooncake QSA state send": [c.served_model("qwen3.8-flash-next")]}
# Each fault on the models whose cases reach its function as is: on the others nothing planted runs.
# A function whose cases name no model (head slices over the models' KV heads) keeps them all.
reached = {r.name: set(r.by_model) or {m.name for m in models} for r in c.probe(models, base).results}
out = {}
for fault, plant in faults.items():
    name = target.get(fault, fault)
    functions = dict(base)
    functions[name] = plant(base[name])
    report = c.probe(alone.get(fault, [m for m in models if m.name in reached[name]]), functions)
    out[fault] = {r.name: r.outcome for r in report.results}
print(json.dumps(out))
"""

# A function whose fault also changes what is built on it in the probe.
SENDS = {"MambaPool transfer entries", "NIXL state send", "Mooncake state send"}
BUILT_ON = {"Mamba2StateShape.create": SENDS, "Mamba2StateShape.create_full_rank": SENDS,
            "KimiLinearStateShape.create": SENDS,
            # Kimi's sends slice its conv row by row, with the rows the pool counts.
            "MambaPool transfer entries": SENDS - {"MambaPool transfer entries"}}


@pytest.fixture(scope="module")
def scripted(tmp_path_factory) -> list[dict]:
    """PLANT, DRAFTERS and TWO_STARS (on Nemotron-3-Super with two '*'s) in one SGLang process:
    SGLang is imported once. Their JSON lines, in that order."""
    config = tmp_path_factory.mktemp("two-stars") / "config.json"
    super_ = json.loads((FIXTURES / "nvidia__NVIDIA-Nemotron-3-Super-120B-A12B-BF16.partial.json").read_text())
    config.write_text(json.dumps({**super_, "mtp_hybrid_override_pattern": "**E"}))
    result = run_in_sglang("-c", PLANT + DRAFTERS + TWO_STARS, json.dumps(DRAFTED), str(config))
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in result.stdout.strip().splitlines()[-3:]]


@pytest.fixture(scope="module")
def planted(scripted) -> dict:
    return scripted[0]


def test_kimi_s_conv_laid_out_as_mamba2_s_is_caught(planted):
    # SGLang's (K-1, dim) conv of Kimi-Linear's real config, planted as (dim, K-1): its shapes, its
    # pool's entries and both sends differ, and nothing else.
    outcomes = planted["untransposed Kimi conv"]
    assert {name for name, outcome in outcomes.items() if outcome != AGREES} == {"KimiLinearStateShape.create"} | SENDS


@pytest.mark.parametrize("fault", [*SOURCES, "changed signature"])
def test_a_planted_fault_is_caught(planted, fault):
    outcomes = planted[fault]
    if fault == "changed signature":
        assert outcomes["compute_head_slice_params"] == NOT_CALLED
        assert {o for name, o in outcomes.items() if name != "compute_head_slice_params"} == {AGREES}
        return
    differs = {name for name, outcome in outcomes.items() if outcome != AGREES}
    assert differs == {fault} | BUILT_ON.get(fault, set())
    assert outcomes[fault] == DIFFERS


def test_bailing_v3_agrees_with_sglang_s_own_config_class_and_mixer(cli_runs):
    # BailingHybridConfig gives KimiLinearStateShape its own head_dim (not vLLM's qk_rope_head_dim)
    # and its layer types; BailingKDA's KimiDeltaAttention its conv channels.
    run = cli_runs["bailing"]
    assert run["code"] == 0, run["stderr"][-3000:]
    functions = {f["function"]: f for f in json.loads(run["stdout"])["functions"]}
    assert {f["outcome"] for f in functions.values()} == {AGREES}
    assert functions["KimiDeltaAttention conv channels"]["cases"] == 3           # TP 1 rank 0, TP 2 ranks 0, 1
    assert functions["mambaish_config state layers"]["cases"] == 1
    assert functions["NIXL state send"]["cases"] == functions["Mooncake state send"]["cases"] == 4


FIXTURES = ROOT / "tests" / "fixtures" / "hf-configs"
EAGLE3 = str(FIXTURES / "sgl-project__SpecForge__qwen3.5-4b-eagle3.json")
STANDALONE = str(FIXTURES / "Qwen__Qwen3-0.6B.partial.json")

# A draft model's pool from SGLang's own ModelConfig of it, against mambaxfer's, as is and with a
# fault planted in each of SGLang's parts: its pool one layer deeper, its config twice the heads.
DRAFTERS = r"""
import json, sys
from mambaxfer_cli.engines.sglang import conformance as c
from sglang.srt.configs.model_config import ModelConfig

name = "draft KV pool entries"
pool, heads = c.load_functions([name])[name], ModelConfig.get_num_kv_heads
faults = {"none": (pool, heads), "deeper pool": (lambda **k: pool(**{**k, "layer_num": k["layer_num"] + 1}), heads),
          "twice the heads": (pool, lambda self, tp, *a: 2 * heads(self, tp, *a))}
out = {}
for algorithm, path, model in json.loads(sys.argv[1]):
    for fault, (planted, counted) in faults.items():
        ModelConfig.get_num_kv_heads = counted
        report = c.probe([c.served_model(model)], {name: planted}, max_tp=4, drafter=(algorithm, path))
        found = next(r for r in report.results if r.name == name).to_dict()
        out[f"{algorithm} {fault}"] = [found["outcome"], found["cases"], list(found.get("by_model", {}))]
ModelConfig.get_num_kv_heads = heads
print(json.dumps(out))
"""


DRAFTED = [["EAGLE3", EAGLE3, "qwen3.5-0.8b"], ["STANDALONE", STANDALONE, "qwen3-next-80b"]]


def test_eagle3_and_standalone_drafters_agree_and_planted_faults_are_caught(scripted):
    """SpecForge's EAGLE-3 drafter for Qwen3.5-4B (1 layer, 4 KV heads of 256) on Qwen3.5-0.8B and
    Qwen3-0.6B as a STANDALONE draft (28 layers, 8 KV heads of 128) on Qwen3-Next-80B: SGLang's
    draft worker's pool (ModelConfig, _compute_model_num_layers, MHATokenToKVPool, the remapped
    ids) agrees with mambaxfer's entries at each TP size; each planted fault differs."""
    out = scripted[1]
    for algorithm, _, model in DRAFTED:
        outcome, count, models = out[f"{algorithm} none"]
        assert outcome == AGREES and count == 3 * 2 and models == [f"{model} + {algorithm}"], out
        for fault in ("deeper pool", "twice the heads"):
            assert out[f"{algorithm} {fault}"][0] == DIFFERS, (fault, out)


# Nemotron-3-Super with two '*'s in its MTP pattern: SGLang's own ModelConfig of it as a draft
# (NemotronHConfig, _config_draft_model), then the probe as is and with mambaxfer's draft given a
# layer per '*' (what NemotronHMultiTokenPredictor builds, not what the pool keeps).
TWO_STARS = r"""
import json, sys, torch
from types import SimpleNamespace
from mambaxfer_cli.engines.sglang import conformance as c
from mambaxfer_cli.engines.sglang.families.nemotron_h import check_mtp_pattern
from mambaxfer_cli.errors import Refused
from sglang.srt.configs.hybrid_arch import mamba2_config
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
from sglang.srt.model_executor.model_runner_components import layer_setup

config = c._drafter_config("EAGLE", sys.argv[2])
layers = layer_setup._compute_model_num_layers(model=SimpleNamespace(), is_draft_worker=True, model_config=config)
pattern = config.hf_config.mtp_hybrid_override_pattern
out = {"sglang": [pattern, layers, mamba2_config(config) is None], "writes": {}}
# the draft pool SGLang sizes, written by each '*' at its layer id (its place in the pattern)
pool = MHATokenToKVPool(size=16, page_size=1, dtype=torch.bfloat16, head_num=1, head_dim=8, layer_num=layers,
                        device="cpu", enable_memory_saver=False)
kv = torch.zeros(2, 1, 8, dtype=torch.bfloat16)
for place in [i for i, char in enumerate(pattern) if char == "*"]:
    try:
        pool.set_kv_buffer(SimpleNamespace(layer_id=place), torch.tensor([1, 2]), kv, kv)
        out["writes"][place] = "written"
    except Exception as exc:
        out["writes"][place] = f"{type(exc).__name__}: {exc}"
try:
    check_mtp_pattern(json.load(open(sys.argv[2])))
    out["ours"] = "planned"
except Refused as exc:
    out["ours"] = str(exc)
print(json.dumps(out))
"""


def test_a_nemotron_h_mtp_pattern_of_two_stars_is_refused_as_sglangs_pool_write_fails(scripted):
    """SGLang sizes the draft pool at one layer (an MHATokenToKVPool, no Mamba in it); the second
    '*' writes layer id 1 into it, which raises: mambaxfer refuses the pattern in those words."""
    out = scripted[2]
    assert out["sglang"] == ["**E", 1, True], out
    assert out["writes"] == {"0": "written", "1": "IndexError: list index out of range"}, out
    assert out["writes"]["1"] in out["ours"] and "place 1 of **E" in out["ours"], out


def test_conformance_takes_a_draft_model_and_compares_its_pool(cli_runs):
    run = cli_runs["draft model"]
    assert run["code"] == 0, run["stderr"][-3000:]
    functions = {f["function"]: f for f in json.loads(run["stdout"])["functions"]}
    assert {f["outcome"] for f in functions.values()} == {AGREES}
    assert list(functions["draft KV pool entries"]["by_model"]) == ["qwen3.5-0.8b + EAGLE3"]


@pytest.mark.parametrize("args, words", [
    (["--speculative-algorithm", "EAGLE3"], "needs --draft-model here"),
    (["--draft-model", EAGLE3], "needs --speculative-algorithm"),
    (["--speculative-algorithm", "NGRAM", "--draft-model", EAGLE3], "no draft KV pool to compare"),
])
def test_a_draft_flag_conformance_cannot_compare_is_one_line(args, words):
    assert_user_error(run_cli("conformance", "--engine", "sglang", "--model", "qwen3.5-0.8b", *args), words)
