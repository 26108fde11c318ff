"""The option a person meant by one a server's parser does not take: only where one fits."""

from __future__ import annotations

import pytest

from mambaxfer_cli.preflight.report import meant, unrecognized

TABLE = ("-tp", "--tensor-parallel-size", "--block-size", "--dcp-size", "--kv-transfer-config",
         "--kv-events-config", "--enable-custom-all-reduce", "--disable-custom-all-reduce", "--tp-size",
         "--page-size", "--disable-logging-iteration-details", "--pp-size", "--pp-max-micro-batch-size")


@pytest.mark.parametrize("name, found", [
    ("--tp", "-tp"),                                    # the same name, other dashes
    ("--tensor_parallel_size", "--tensor-parallel-size"),
    ("-tensor-parallel", "--tensor-parallel-size"),     # the long option it abbreviates
    ("--tensor-paralel-size", "--tensor-parallel-size"),   # a letter missing
    ("--blcok-size", "--block-size"),                   # two swapped
    ("--page-sise", "--page-size"),                     # one wrong
    ("--disaggregation-mode", None),                    # alike, but another option
    ("--kv-transfer-cfg", None),
    ("--enable-custom-all-reduc", "--enable-custom-all-reduce"),
    ("--disable-custom-all-reduce-x", None),            # two letters and a dash away
    ("--pp", "--pp-size"),
    ("--pp-max", "--pp-max-micro-batch-size"),
    ("--p", None),                                      # abbreviates several
    ("--dcp", "--dcp-size"),
    ("--bs", None),
])
def test_only_an_option_that_fits_is_meant(name, found):
    assert meant(name, TABLE) == found
    hint = f" (did you mean {found}?)" if found else ""
    assert unrecognized([name], TABLE) == f"unrecognized arguments: {name}{hint}"


def test_the_same_name_with_or_without_its_size_is_meant():
    # SGLang's --tp-size in a vllm serve line: vLLM's -tp.
    assert meant("--tp-size", ("-tp", "-pp", "--tensor-parallel-size")) == "-tp"
    # vLLM's -pp in an SGLang line: SGLang's --pp-size, though --pp abbreviates several options.
    assert meant("-pp", TABLE) == "--pp-size"
