"""What every command says the same way: an error or a note through a pipe is one line (a log
that grep reads whole)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest


def piped(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The CLI with stdout and stderr pipes and no ``COLUMNS``, as in a CI log."""
    full = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run([sys.executable, "-m", "mambaxfer_cli", *args], capture_output=True, text=True,
                          timeout=120, env={**full, **(env or {})})


@pytest.mark.parametrize("args,starts", [
    # our own error: longer than 80 columns
    (("plan", "--model", "jamba-but-a-preset-name-long-enough-to-wrap-at-eighty-columns", "--p-tp", "1",
      "--d-tp", "2"), "error: "),
    # typer's usage error, through the same red line
    (("plan", "--model", "jamba", "--p-tp", "abc", "--d-tp", "1"), "error: Invalid value for '--p-tp'"),
], ids=["ours", "typer"])
def test_an_error_through_a_pipe_is_one_line(args, starts):
    result = piped(*args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(starts), result.stderr
    assert len(lines[0]) > 80            # it would have wrapped at 80 columns


def test_a_note_through_a_pipe_is_one_line(tmp_path):
    out = tmp_path / ("a-directory-whose-name-is-long-enough-to-wrap" * 2) / "plan.json"
    out.parent.mkdir()
    result = piped("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "2", "--output", str(out))
    assert result.returncode == 0, result.stderr
    wrote = [line for line in result.stderr.splitlines() if line.startswith("wrote ")]
    assert len(wrote) == 1 and str(out) in wrote[0] and wrote[0].endswith("0 warnings"), result.stderr


def test_a_width_asked_for_still_wraps():
    result = piped("plan", "--model", "jamba", "--p-tp", "3", "--d-tp", "2", env={"COLUMNS": "60"})
    lines = result.stderr.splitlines()
    assert len(lines) > 1 and max(map(len, lines)) <= 60, result.stderr


def test_a_chart_without_matplotlib_is_refused_before_the_run(tmp_path):
    """Whether or not matplotlib is installed here, the run sees none (``sys.modules`` says so)."""
    chart = tmp_path / "b.png"
    script = ("import sys; sys.modules['matplotlib'] = None; sys.argv[0] = 'mambaxfer'; "
              "from mambaxfer_cli.__main__ import main; main()")
    result = subprocess.run([sys.executable, "-c", script, "bench", "--model", "jamba", "--p-tp", "1", "--d-tp", "2",
                             "--device", "cpu", "--iters", "1", "--request-blocks", "1", "--chart", str(chart)],
                            capture_output=True, text=True, timeout=60,
                            env={k: v for k, v in os.environ.items() if k != "COLUMNS"})
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        "error: --chart needs matplotlib, which is not installed: pip install 'mambaxfer[bench]'"]
    assert not result.stdout and not chart.exists()


def test_the_summaries_name_both_engines():
    """The app's help, the summaries of the commands both engines answer, and the package's
    description name vLLM and SGLang alike."""
    import tomllib
    from pathlib import Path

    from mambaxfer_cli.cli import COMMANDS

    result = piped("--help", env={"COLUMNS": "200"})
    first = " ".join(result.stdout.split()).split("[ARGS]...")[1].split("╭")[0]     # the app's help
    assert "vLLM" in first and "SGLang" in first, result.stdout
    for name in ("plan", "check", "preflight", "inspect", "execute", "conformance"):
        summary = COMMANDS[name][1]
        assert "vLLM" in summary and "SGLang" in summary, (name, summary)
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    assert "vLLM" in project["description"] and "SGLang" in project["description"]


def completed(*words: str) -> list[str]:
    """What bash's completion offers for the last word of ``mambaxfer WORDS`` (typer's protocol:
    the line in COMP_WORDS, the completed word's index in COMP_CWORD)."""
    line = " ".join(("mambaxfer", *words))
    result = piped(env={"_MAMBAXFER_COMPLETE": "complete_bash", "COMP_WORDS": line, "COMP_CWORD": str(len(words))})
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_completion_offers_option_values():
    from mambaxfer_cli.engines import engine, names
    from mambaxfer_cli.readers.model_source import preset_names

    assert completed("plan", "--model", "") == preset_names()
    assert completed("check", "-m", "qwen3") == [n for n in preset_names() if n.startswith("qwen3")]
    assert completed("check", "--engine", "") == sorted(names()) == ["sglang", "vllm"]
    assert completed("check", "--engine", "vllm,") == ["vllm,sglang"]
    gpus = completed("plan", "--gpu", "")
    assert "H100" in gpus and "RTX PRO 6000" in gpus and completed("plan", "--gpu", "B3") == ["B300"]
    releases = list(engine("vllm").release_names())
    for flag in ("--vllm-version", "--p-vllm-version", "--d-vllm-version"):
        assert completed("plan", flag, "") == releases, flag


XPYD = re.compile(r"\b\d+[Pp]\d+[Dd]\b|\bP\d+ ?(?:→|->|-|/) ?D\d+\b")    # 1P2D, P1 → D2, P1-D2, P1/D2


@pytest.mark.parametrize("engine,model", [("vllm", "granite-4.0-h-tiny"), ("sglang", "nemotron-h-8b")])
def test_a_pairing_is_written_with_its_tp_sizes(engine, model, tmp_path):
    """``1P2D`` reads as instance counts to a deployer: the table, the verdict lines and the
    JUnit cases write ``P TP 1 → D TP 2``."""
    junit = tmp_path / "junit.xml"
    result = piped("check", "--engine", engine, "--model", model, "--pairs", "1:2,2:1", "--junit", str(junit))
    assert result.returncode == 1, result.stderr
    shown = result.stdout + junit.read_text()
    assert shown.count("P TP 1 → D TP 2") >= 3 and shown.count("P TP 2 → D TP 1") >= 3, shown
    assert not XPYD.findall(shown), XPYD.findall(shown)


def test_pairs_says_how_to_write_an_xpyd_pairing():
    result = piped("check", "--model", "jamba", "--pairs", "1P2D")
    assert result.returncode == 2
    assert "'1P2D' reads as instance counts; for P TP 1 → D TP 2 write 1:2" in result.stderr
