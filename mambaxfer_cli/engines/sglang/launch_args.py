"""Read an SGLang server's command line (or a script that runs one) as SGLang 0.5.23 does:
``python -m sglang.launch_server`` and ``sglang serve [MODEL]`` (which drops ``--model-type X``,
``cli/serve.py``) parse with a plain ``argparse.ArgumentParser`` (``ServerArgs.add_cli_args``):
aliases and unique abbreviations, no underscore spellings, no ``--no-`` forms. Its flags are
``releases/v0_5_23/launch_flags.json``; those that change the transfer feed ``LaunchLine`` (``READ``)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from mambaxfer_cli.errors import UserError, quoted
from mambaxfer_cli.readers.shell import (
    OPTIONAL, SETS, Command, Occurrence, Option, Parsed, ServerLine, abbreviated, looked_up, negative_number,
    read_server, runs_server, server_start,
)

LAUNCH_MODULE = "sglang.launch_server"
RELEASE = "0.5.23"
CONV_DTYPE_VAR, SSM_DTYPE_VAR = "SGLANG_MAMBA_CONV_DTYPE", "SGLANG_MAMBA_SSM_DTYPE"
STATE_VARS = (CONV_DTYPE_VAR, SSM_DTYPE_VAR)

# SGLang's argparse dest -> the LaunchLine field it feeds: of the same name, or renamed. Every other
# flag does not change the transfer.
READ = {name: name for name in (
    "enable_dp_attention page_size kv_cache_dtype mamba_ssm_dtype disable_radix_cache max_mamba_cache_size"
    " mamba_full_memory_ratio mamba_track_interval attention_backend speculative_algorithm qsa_indexer_dtype"
).split()} | {
    "model_path": "model", "disaggregation_mode": "mode", "tp_size": "tp", "pp_size": "pp", "dp_size": "dp",
    "attn_dp_size": "attn_dp", "attn_cp_size": "attn_cp", "disaggregation_transfer_backend": "transfer_backend",
    "disaggregation_bootstrap_port": "bootstrap_port", "mamba_radix_cache_strategy": "radix_strategy",
    "enable_unified_memory": "unified_memory", "speculative_draft_model_path": "draft_model"}
INTS = ("tp", "pp", "dp", "attn_dp", "attn_cp", "page_size", "bootstrap_port", "max_mamba_cache_size",
        "mamba_track_interval")
# The spelling a corrected line uses for each field.
FLAG = {"model": "--model-path", "mode": "--disaggregation-mode", "tp": "--tp-size", "pp": "--pp-size",
        "page_size": "--page-size", "kv_cache_dtype": "--kv-cache-dtype", "mamba_ssm_dtype": "--mamba-ssm-dtype",
        "transfer_backend": "--disaggregation-transfer-backend", "radix_strategy": "--mamba-radix-cache-strategy",
        "speculative_algorithm": "--speculative-algorithm", "draft_model": "--speculative-draft-model-path",
        "qsa_indexer_dtype": "--qsa-indexer-dtype"}

SAID = ("argument {flag}: ignored explicit argument {value}", "argument {flag}: expected {count}")   # argparse's


@lru_cache(maxsize=None)
def flag_table(release: str = RELEASE) -> Mapping[str, Option]:
    """Every option string SGLang's launcher of ``release`` accepts."""
    path = Path(__file__).parent / "releases" / f"v{release.replace('.', '_')}" / "launch_flags.json"
    data = json.loads(path.read_text())
    return {k: Option(v["dest"], v["takes"], tuple(v.get("choices", ())), v.get("default"))
            for k, v in data["options"].items()}


@dataclass(frozen=True)
class LaunchLine(ServerLine):
    """One SGLang server's command line, as far as the transfer is concerned."""

    model: str
    mode: str = "null"                       # --disaggregation-mode
    tp: int = 1
    pp: int = 1
    dp: int = 1
    attn_dp: int = 1
    attn_cp: int = 1
    enable_dp_attention: bool = False
    page_size: int | None = None             # None: SGLang's default (1 on CUDA)
    kv_cache_dtype: str = "auto"
    mamba_ssm_dtype: str | None = None
    transfer_backend: str = "mooncake"       # SGLang's default
    bootstrap_port: int = 8998
    radix_strategy: str = "auto"
    disable_radix_cache: bool = False
    max_mamba_cache_size: int | None = None
    mamba_full_memory_ratio: float | None = None
    mamba_track_interval: int = 256
    attention_backend: str | None = None
    unified_memory: bool = False
    speculative_algorithm: str | None = None
    draft_model: str | None = None           # --speculative-draft-model-path
    qsa_indexer_dtype: str = "auto"          # the compressed QSA keys' dtype (a Qwen4Exp's)
    launcher: str = "python -m sglang.launch_server"
    env: tuple[tuple[str, str], ...] = ()          # what SGLang's process sees of its state variables
    env_prefix: tuple[tuple[str, str], ...] = ()   # VAR=value words before the command
    words: tuple[str, ...] = ()
    start: int = 3                                 # the first of SGLang's own words
    occurrences: Mapping[str, tuple[Occurrence, ...]] = field(default_factory=dict)  # by field
    ignored: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    origin: str = ""                               # the option that gave the line (--decode-file F)

    @property
    def attn_dp_size(self) -> int:
        """Attention DP groups: ``--attn-dp-size``, else the deprecated ``--dp-size N
        --enable-dp-attention`` (``_handle_deprecated_dp_attention``)."""
        if self.attn_dp > 1 or not self.enable_dp_attention:
            return self.attn_dp
        return self.dp

    @property
    def attn_tp(self) -> int:
        """The attention TP size, the one SGLang's state and rank mapping follow
        (``derive_attn_tp_size``: TP over attention DP over attention CP)."""
        return max(1, self.tp // self.attn_dp_size // self.attn_cp)

    @property
    def state_env(self) -> dict[str, str]:
        """SGLang's state dtype variables as the server resolves them: ``--mamba-ssm-dtype`` sets
        SGLANG_MAMBA_SSM_DTYPE over the environment's (``handle_environment_variables``)."""
        env = dict(self.env)
        if self.mamba_ssm_dtype is not None:
            env[SSM_DTYPE_VAR] = self.mamba_ssm_dtype
        return env

    def exported(self) -> tuple[tuple[str, str], ...]:
        return self.env


def _start(words: list[str]) -> int | None:
    """Index of the words that start SGLang's server (``python -m sglang.launch_server``, ``sglang serve``)."""
    return server_start(words, "sglang", LAUNCH_MODULE)


def launches(text: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``text`` runs an SGLang server (what preflight recognises the engine by)."""
    try:
        return runs_server(text, "", _start, environ)
    except UserError:
        return False


def parse_launch(text: str, where: str = "--prefill", environ: Mapping[str, str] | None = None) -> LaunchLine:
    """One SGLang server's line from a command line or a shell script (``environ``: what it starts with)."""
    def parse(found: Command, notes: tuple[str, ...]) -> LaunchLine:
        env = {k: v for k, v in found.environment.items() if k in STATE_VARS}
        return replace(_parse_words(found.words, found.assigns, env, where, notes), origin=where)

    return read_server(text, where, environ, "SGLang", _start, f"'python -m {LAUNCH_MODULE} --model-path M ...' (or "
                       f"'sglang serve M ...')", STATE_VARS, parse)


def reparse(line: LaunchLine, words: list[str], env_prefix: tuple[tuple[str, str], ...], where: str) -> LaunchLine:
    """The same server with its words or env prefixes edited (a corrected line)."""
    env = {**dict(line.env), **{k: v for k, v in env_prefix if k in STATE_VARS}}
    return _parse_words(list(words), tuple(env_prefix), env, where, line.kept_notes())


def _parse_words(words: list[str], assigns: tuple[tuple[str, str], ...], env: Mapping[str, str], where: str,
                 notes: tuple[str, ...]) -> LaunchLine:
    serve = words[1] == "serve"
    i = 2 if serve else 3          # sglang serve ... | python -m sglang.launch_server ...
    start = i
    launcher = "sglang serve" if serve else f"{words[0]} -m {LAUNCH_MODULE}"
    parsed = Parsed(where, SAID, list(notes))
    table = flag_table()
    if serve and i < len(words) and not words[i].startswith("-"):     # _normalize_positional_model_path
        parsed.values["model"] = words[i]
        parsed.at("model", words[i], i, i + 1)
        i += 1
    while i < len(words):
        word = words[i]
        if serve and (word == "--model-type" or word.startswith("--model-type=")):   # _extract_model_type_override
            parsed.ignored.append("--model-type")
            i += 1 if "=" in word else 2
            continue
        if not word.startswith("-") or word == "-" or negative_number(word):
            i = parsed.unrecognized(word, word, words, i)     # argparse: an extra positional, alone
            continue
        name, eq, after = word.partition("=")
        inline = after if eq and name.startswith("--") else None
        if not name.startswith("--"):
            name, inline = word, None
        spelling = looked_up(lambda n: abbreviated(table, n), name, where, " (SGLang's parser exits)")
        if spelling is None:
            i = parsed.unrecognized(name, inline, words, i)
            continue
        option = table[spelling]
        value, end = parsed.option(words, i, spelling, inline, spelling, option.dest, option.takes,
                                   READ.get(option.dest))
        if option.takes not in SETS + (OPTIONAL,) and option.choices and str(value) not in option.choices:
            raise UserError(f"{where}: argument {spelling}: invalid choice: {quoted(str(value))} (choose from "
                            f"{', '.join(map(repr, option.choices))})")
        i = end
    if "model" not in parsed.values:
        raise UserError(f"{where}: no model: SGLang needs --model-path M")
    return LaunchLine(launcher=launcher, env=tuple(sorted(env.items())), env_prefix=tuple(assigns),
                      words=tuple(words), start=start, **parsed.lists(), **_fields(parsed.values, where))


def _int(value: Any, name: str, where: str) -> int:
    text = str(value).strip()
    if not re.fullmatch(r"[+-]?\d{1,12}", text):
        raise UserError(f"{where}: argument {name}: invalid int value: {quoted(str(value))}")
    return int(text)


def _fields(values: dict[str, Any], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        flag = FLAG.get(key, f"--{key.replace('_', '-')}")
        if key in INTS:
            out[key] = _int(value, flag, where)
        elif key == "mamba_full_memory_ratio":
            try:
                out[key] = float(value)
            except ValueError:
                raise UserError(f"{where}: argument --mamba-full-memory-ratio: invalid float value: "
                                f"{quoted(str(value))}") from None
        else:
            out[key] = value
    for key in ("tp", "pp", "dp", "attn_dp", "attn_cp", "page_size"):
        if key in out and out[key] < 1:
            raise UserError(f"{where}: {FLAG.get(key, '--' + key.replace('_', '-'))} must be at least 1, got "
                            f"{out[key]}")
    if out.get("tp", 1) > 1 << 10 or out.get("page_size", 1) > 1 << 20:
        raise UserError(f"{where}: --tp-size or --page-size is larger than any server uses")
    return out

