"""What the two sides of a two-host run compare (no NIXL): the plan's own document, in an order
that names the cause first, so that fields the plan gains are compared without code here."""

from __future__ import annotations

from array import array
from dataclasses import replace

import pytest

from mambaxfer_cli.engines.vllm.transfer.agreement import geometry as geometry_of
from mambaxfer_cli.execute import agreement
from mambaxfer_cli.execute.discovery import Discovery, resolve
from mambaxfer_cli.engines.vllm.transfer.plan_source import plan_to_execute
from mambaxfer_cli.execute.tasks import cut_layers
from mambaxfer_cli.readers.model_source import load_model
from mambaxfer_cli.engines.vllm.plan import Plan


def plan_of(model: str = "jamba", layers: int = 8, p_tp: int = 1, d_tp: int = 2, seed: int = 0, engine=None,
            **overrides):
    spec = cut_layers(load_model(model, **overrides), layers)
    return plan_to_execute(spec, p_tp, d_tp, semantics="exact", coalesce=False, blocks=None,
                           request_blocks=2, seed=seed, **({"engine": engine} if engine else {}))


def test_geometry_is_the_plan_document_without_its_ids_and_wording():
    plan = plan_of()
    document = plan.to_dict()
    geometry = geometry_of(plan)
    assert set(geometry) == (set(document) - {"schema", "reads", "warnings"}) | {"tp", "plan_hash"}
    assert list(geometry)[:6] == ["model", "semantics", "tp", "engines", "vllm", "descriptors"]
    assert "reads" not in geometry["descriptors"]
    # The model as the document has it, less why each dtype is what it is (an explanation).
    model = {k: v for k, v in document["model"].items() if k != "origin"}
    assert geometry["model"] == {**model, "config_hash": geometry["model"]["config_hash"]}
    assert geometry["tp"] == {"prefill": 1, "decode": 2}
    assert agreement.mismatch(geometry, geometry_of(plan_of())) is None


def test_the_first_differing_field_is_named_with_both_values():
    mine = geometry_of(plan_of())
    assert agreement.mismatch(mine, geometry_of(plan_of(ssm_dtype="float32"))) == (
        'prefill and decode disagree on model.ssm_dtype: prefill has "bfloat16", decode has "float32"; '
        "start both sides with the same model and engine options")
    # The cause, not what follows from it (D's layouts, page sizes, the plan hash).
    assert "tp.decode: prefill has 2, decode has 4" in agreement.mismatch(mine, geometry_of(plan_of(d_tp=4)))
    assert "model.name" in agreement.mismatch(mine, geometry_of(plan_of("granite-4.0-h-tiny", 6)))
    assert "descriptors.request.prefill_blocks" in agreement.mismatch(mine, geometry_of(plan_of(seed=1)))


def test_a_config_value_is_named_and_hashed():
    qwen = plan_of("qwen3.5-0.8b", 4, 1, 1)
    geometry = geometry_of(qwen)
    params = dict(qwen.model.params)
    key = next(iter(params))
    other = replace(qwen, model=replace(qwen.model, params={**params, key: params[key] + 1}))
    changed = geometry_of(other)
    assert changed["model"]["config_hash"] != geometry["model"]["config_hash"]
    assert f"model.params.{key}: prefill has {params[key]}, decode has {params[key] + 1}" in \
        agreement.mismatch(geometry, changed)


def test_fields_the_plan_gains_are_compared(monkeypatch):
    """A field added to the plan document flows into the comparison without code here."""
    plan = plan_of()
    original = Plan.to_dict
    monkeypatch.setattr(Plan, "to_dict", lambda self, *a: {**original(self, *a), "future": {"x": 1}})
    mine = geometry_of(plan)
    monkeypatch.setattr(Plan, "to_dict", lambda self, *a: {**original(self, *a), "future": {"x": 2}})
    assert "future.x: prefill has 1, decode has 2" in agreement.mismatch(mine, geometry_of(plan))


def test_engine_geometry_is_named_before_what_derives_from_it():
    from mambaxfer_cli.engines.vllm.geometry import EngineFlags
    from mambaxfer_cli.engines.vllm.releases import release

    V0_33, V0_34 = release("0.33"), release("0.34")

    mine = geometry_of(plan_of(engine=EngineFlags(release=V0_33)))     # Jamba: 80-token blocks
    theirs = geometry_of(plan_of(engine=EngineFlags(release=V0_33, block_size=160)))
    assert "engines.prefill.block_size: prefill has 80, decode has 160" in agreement.mismatch(mine, theirs)
    theirs = geometry_of(plan_of(engine=EngineFlags(release=V0_33, attention_backend="FLASHINFER")))
    assert "engines.prefill.attention_backend" in agreement.mismatch(mine, theirs)
    # Sides of two releases disagree on the engines before anything derived from them.
    theirs = geometry_of(plan_of(engine=EngineFlags(release=V0_34, block_size=80)))
    assert "engines.prefill.vllm_version: prefill has \"0.33\", decode has \"0.34\"" in \
        agreement.mismatch(mine, theirs)


def test_plan_hash_covers_the_descriptor_ids():
    plan = plan_of()
    geometry = geometry_of(plan)
    read = plan.descriptors.reads[0]
    ids = array("q", read.remote_ids)
    ids[0] += 1
    edited = replace(plan, descriptors=replace(plan.descriptors, reads=(replace(read, remote_ids=ids),
                                                                        *plan.descriptors.reads[1:])))
    assert "plan_hash" in agreement.mismatch(geometry, geometry_of(edited))


def test_control_messages_round_trip_and_reads_are_not_ours():
    message = agreement.encode("hello", d_rank=1, iters=3, geometry={"a": [1, 2]})
    assert agreement.decode(message) == {"kind": "hello", "d_rank": 1, "iters": 3, "geometry": {"a": [1, 2]}}
    assert agreement.decode(b"direct-iter0") is None
    assert agreement.decode(agreement.TAG + b"not json") is None


def test_discovery_of_each_mode():
    direct = resolve("decode", None, "127.0.0.2:5600", None, None)
    assert direct == Discovery("decode", "direct", host="127.0.0.2", port=5600)
    assert direct.p_address(3) == ("127.0.0.2", 5603)
    assert (direct.listen_port("P", 2), direct.listen_port("D", 1), direct.environment()) == (5602, 0, {})
    etcd = resolve("prefill", None, None, "http://a:2379, http://b:2379", "run-1")
    assert etcd.environment() == {"NIXL_ETCD_ENDPOINTS": "http://a:2379,http://b:2379",
                                  "NIXL_ETCD_NAMESPACE": "/mambaxfer/run-1"}
    assert etcd.listen_port("P", 0) is None
    assert resolve(None, None, None, None, None) is None
    assert resolve("prefill", "[::1]:7000", None, None, None).host == "::1"


@pytest.mark.parametrize("text", ["host", "host:", ":80", "h:99999", "a:b:1"])
def test_bad_addresses(text):
    from mambaxfer_cli.errors import UserError

    with pytest.raises(UserError):
        resolve("decode", None, text, None, None)
