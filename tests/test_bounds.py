"""The inputs that used to end in a traceback, a hang, a memory blow-up or a wrong exit 0: each is
now one red line and exit 2, naming the bound, before anything large is allocated."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from cli_run import assert_user_error, run_cli

HF = Path(__file__).parent / "fixtures" / "hf-configs"


def config(tmp_path, name: str, **change) -> str:
    data = json.loads((HF / name).read_text())
    data.update(change)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize("fixture,change,fragment", [
    ("mistralai__Mamba-Codestral-7B-v0.1.json", {"num_heads": 2 ** 63},
     "key 'num_heads' 9223372036854775808 is larger"),
    ("ai21labs__Jamba-v0.1.json", {"num_key_value_heads": 2 ** 63}, "key 'num_key_value_heads' 9223372036854775808"),
    ("ai21labs__Jamba-v0.1.json", {"num_key_value_heads": -2}, "'num_key_value_heads' must be a positive integer"),
    ("ai21labs__Jamba-v0.1.json", {"num_key_value_heads": 0}, "'num_key_value_heads' must be a positive integer"),
    ("state-spaces__mamba-130m-hf.json", {"num_hidden_layers": 10 ** 9},
     "num_hidden_layers 1000000000 is larger than any model's; at most 4096"),
    ("mistralai__Mamba-Codestral-7B-v0.1.json", {"state_size": 1 << 20, "head_dim": 4096},
     "one layer's state would be"),
    ("ai21labs__Jamba-v0.1.json", {"torch_dtype": {"a": 1}}, "key 'torch_dtype' must be a dtype name"),
])
def test_config_values_beyond_any_model(tmp_path, fixture, change, fragment):
    started = time.time()
    assert_user_error(run_cli("plan", "--model", config(tmp_path, fixture, **change), "--p-tp", "1", "--d-tp", "2"),
                      fragment)
    assert time.time() - started < 20


@pytest.mark.parametrize("content,fragment", [
    (b'{"model_type": "mamba\xff"}', "not UTF-8 text (byte 0xff at offset 21)"),
    (b"[" * 100_000 + b"]" * 100_000, "JSON nested too deeply"),
    (b'{"model_type": "mamba", "num_hidden_layers": ' + b"9" * 5000 + b"}", "an integer of more than 4300 digits"),
])
def test_config_files_that_are_not_configs(tmp_path, content, fragment):
    path = tmp_path / "config.json"
    path.write_bytes(content)
    assert_user_error(run_cli("inspect", "--model", str(path)), fragment)


def test_a_yaml_alias_bomb_plan_is_refused_before_it_expands(tmp_path):
    lines = ["schema: mambaxfer.plan/v1", 'a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 12)]
    path = tmp_path / "plan.yaml"
    path.write_text("\n".join(lines))   # 9^12 strings in 600 bytes
    started = time.time()
    assert_user_error(run_cli("execute", "--plan", str(path), "--device", "cpu"), "holds more than 1000000 values")
    assert time.time() - started < 20


def test_deeply_nested_yaml_is_refused_quickly(tmp_path):
    path = tmp_path / "model.yaml"
    path.write_text("config: " + "[" * 100_000 + "]" * 100_000 + "\n")
    started = time.time()
    assert_user_error(run_cli("inspect", "--model", str(path)), "YAML nested more than 64 levels deep")
    assert time.time() - started < 10


@pytest.mark.parametrize("args,fragment", [
    (("check", "--model", "granite-4.0-h-tiny", "--pairs", "1:2", "--num-spec", "1000000"),
     "--num-spec 1000000 is larger than any speculative decoding uses; at most 128"),
    (("check", "--model", "jamba", "--max-tp", "1000000000"), "--max-tp 1000000000 is larger"),
    (("check", "--model", "mamba-codestral-7b", "--pairs", "1:2", "--request-blocks", "20"),
     "simulating this request needs about 7.7 GiB, more than check's 4 GiB"),
    (("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "2", "--kv-groups", "ssm*99999999999",
      "--kv-tensors", "4"), "--kv-groups: more than 4096 groups"),
    (("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "2", "--kv-groups", "ssm*7,attention",
      "--kv-tensors", "99999999999"), "--kv-tensors 99999999999 is larger"),
    (("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "2", "--p-num-blocks", "2000000000000000000"),
     "--p-num-blocks 2000000000000000000 is larger"),   # used to overflow into negative IDs, exit 0
    (("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "2", "--seed", "-1"), "--seed must be >= 0"),
    (("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "2", "--decode-blocks", ""),
     "--decode-blocks: group 0 has no block"),   # found by the fuzz test: a traceback in the ID table
    (("inspect", "--model", "jamba", "--tp", "100000"), "--tp 100000 is larger"),
])
def test_options_beyond_any_engine(args, fragment):
    started = time.time()
    assert_user_error(run_cli(*args), fragment)
    assert time.time() - started < 20
