"""The SGLang conformance probe: SGLang 0.5.23's own functions against mambaxfer's SGLang rules.

The project's test environment has no SGLang: the tests that need it run SGLang's interpreter
(given in MAMBAXFER_TEST_SGLANG_0_5_23, which ``.ci/sglang-env`` creates) in a subprocess. In CI
(CI=true) a missing interpreter fails those tests; elsewhere they skip.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from mambaxfer_cli.engines.sglang.conformance import AGREES, DIFFERS, NOT_CALLED, SOURCES, probe, served_presets

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


def run_in_sglang(*args: str) -> subprocess.CompletedProcess:
    # This checkout's mambaxfer first, whatever the environment has installed.
    # One torch thread: the probe's tensors are small, and a shared machine pays for idle spinning.
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sglang_python(), "-W", "ignore", *args], capture_output=True, text=True,
                          timeout=TIMEOUT, env=env, cwd=ROOT)


def test_without_sglang_every_function_could_not_be_called():
    # This environment has no SGLang: the probe says so per function and never passes.
    functions = {name: "ModuleNotFoundError: No module named 'sglang'" for name in SOURCES}
    report = probe(served_presets(), functions)
    assert {r.outcome for r in report.results} == {NOT_CALLED} and not report.ok
    assert report.to_dict()["functions"][0]["could_not_be_called"].startswith("ModuleNotFoundError")


@pytest.fixture(scope="module")
def document() -> dict:
    result = run_in_sglang("-m", "mambaxfer_cli.engines.sglang.conformance")
    assert result.stdout, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_sglang_agrees_on_every_function(document):
    assert document["sglang"] == {"version": "0.5.23", "rules": "SGLang 0.5.23"}
    assert document["models"] == [m.name for m in served_presets()]
    assert document["max_tp"] == 8
    outcomes = {f["function"]: (f["outcome"], f["cases"]) for f in document["functions"]}
    assert set(outcomes) == set(SOURCES)
    for name, (outcome, cases) in outcomes.items():
        assert outcome == AGREES, next(f for f in document["functions"] if f["function"] == name)
        assert cases > 0, name
    assert document["ok"] is True


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

def next_slot(cls):
    # The sliced send writes the request's state into the next decode slot.
    from types import SimpleNamespace
    def call(self, *a):
        a = list(a)
        a[6] = [a[6][0] + 1]
        return cls._send_mamba_state_slice(self, *a)
    return SimpleNamespace(_send_mamba_state=cls._send_mamba_state, _send_mamba_state_slice=call)

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
    "MambaMixer2 conv channels": rolled_conv_channels,
    "NIXL state send": next_slot,
    "Mooncake state send": next_slot,
    "changed signature": changed_signature,
}
# The smallest preset of each kind is enough to show each fault (Kimi and odd shapes are stand-ins).
models = [m for m in c.served_presets() if m.name in ("granite-4.0-h-tiny", "mamba-130m", "qwen3.5-0.8b")]
out = {}
for fault, plant in faults.items():
    name = "compute_head_slice_params" if fault == "changed signature" else fault
    functions = dict(base)
    functions[name] = plant(base[name])
    report = c.probe(models, functions)
    out[fault] = {r.name: r.outcome for r in report.results}
print(json.dumps(out))
"""

# A function whose fault also changes what is built on it in the probe.
SENDS = {"MambaPool transfer entries", "NIXL state send", "Mooncake state send"}
BUILT_ON = {"Mamba2StateShape.create": SENDS, "Mamba2StateShape.create_full_rank": SENDS,
            "KimiLinearStateShape.create": {"MambaPool transfer entries"}}


@pytest.fixture(scope="module")
def planted() -> dict:
    result = run_in_sglang("-c", PLANT)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


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
