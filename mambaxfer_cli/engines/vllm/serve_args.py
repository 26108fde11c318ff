"""Read a ``vllm serve`` command line (or a shell script that runs one) as vLLM would: the shell's
part as a shell reads it, vLLM's as ``FlexibleArgumentParser`` does, against each release's
``serve_flags.json`` (docs/preflight.md; docs/reference.md §6a). Pure: text in, one frozen
``ServeLine`` out; every JSON value bounded before it is trusted."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Mapping

from mambaxfer_cli.engines.vllm.releases import NAMES, RELEASES as ALL, release as release_named
from mambaxfer_cli.errors import UserError, quoted
from mambaxfer_cli.limits import MAX_JSON_INT_DIGITS, MAX_NESTING, check_document
from mambaxfer_cli.readers.shell import (
    OPTIONAL, SETS, UNKNOWN, Occurrence, Option, Parsed, ServerLine, abbreviated, looked_up, read_server, server_start,
)
from mambaxfer_cli.engines.vllm.startup import DEFAULT_REPLAYSSM_BUFFER_LEN, MAMBA_BACKENDS
from mambaxfer_cli.planning.dtypes import invalid_choice

CONV_LAYOUT_VAR = "VLLM_SSM_CONV_STATE_LAYOUT"
KV_LAYOUT_VAR = "VLLM_KV_CACHE_LAYOUT"
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
KV_ROLES = ("kv_producer", "kv_consumer", "kv_both")
PUSH_CONNECTOR = "NixlPushConnector"
NIXL_CONNECTORS = ("NixlConnector", "NixlPullConnector", PUSH_CONNECTOR)

# vLLM's argparse dest -> the ServeLine field it feeds: of the same name, or renamed. Every other flag
# does not change the transfer. mamba_backend and replayssm_buffer_len are read for --use-replayssm's
# start-up check (validate_mamba_cached_kernel).
TRANSFER_FIELDS = {name: name for name in (
    "model block_size dtype kv_cache_dtype mamba_cache_dtype mamba_ssm_cache_dtype attention_backend speculative_config"
    " kv_transfer_config hf_overrides attention_config gdn_prefill_backend additional_config use_replayssm"
    " disable_hybrid_kv_cache_manager mamba_backend replayssm_buffer_len mamba_cache_mode").split()} | {
    "tensor_parallel_size": "tp", "enable_prefix_caching": "prefix_caching", "decode_context_parallel_size": "dcp",
    "pipeline_parallel_size": "pipeline", "enable_mamba_cache_stochastic_rounding": "mamba_stochastic_rounding"}
FLAG = {key: "--" + dest.replace("_", "-") for dest, key in TRANSFER_FIELDS.items()}    # a field's flag
JSON_FIELDS = ("speculative_config", "kv_transfer_config", "hf_overrides", "attention_config", "additional_config")
# Keys inside a JSON flag that only some releases read (the others ignore them).
RELEASE_KEYS = {key: tuple(r.name for r in ALL if key in r.serve_keys)
                for key in dict.fromkeys(k for r in ALL for k in r.serve_keys)}
SAID = ("{flag} takes no value (got {word})", "{flag} expects a value")      # its parser's words


@lru_cache(maxsize=None)
def flag_table(release: str) -> Mapping[str, Option]:
    """Every option string ``vllm serve`` of ``release`` accepts -> (dest, takes, choices)."""
    table = release_named(release).flag_table
    assert table is not None, "every release the registry finds has its serve_flags.json"
    data = json.loads(table.read_text())
    return {k: Option(v[0], v[1], tuple(v[2]) if len(v) > 2 else ()) for k, v in data["options"].items()}


@dataclass(frozen=True)
class Known:
    """A spelling as the releases that know it read it."""

    spelling: str                  # the option string it resolves to (an abbreviation expanded)
    dest: str
    takes: str                     # value | many | optional | true | false | none
    choices: Mapping[str, tuple[str, ...]]   # release -> accepted values (none: any)
    releases: tuple[str, ...]


def resolve(name: str) -> Known | None:
    """What ``name`` is to vLLM's parser in each release (``abbreviated``); None when none knows it."""
    found: dict[str, tuple[str, Option]] = {}
    for release in NAMES:
        table = flag_table(release)
        spelling = abbreviated(table, name, 4, f" (vLLM {release} refuses it)")
        if spelling is not None:
            found[release] = (spelling, table[spelling])
    if not found:
        return None
    spelling, option = found[max(found)]
    return Known(spelling, option.dest, option.takes, {r: o.choices for r, (_, o) in found.items() if o.choices},
                 tuple(sorted(found)))


@dataclass(frozen=True)
class ServeLine(ServerLine):
    """One engine's command line, as far as the transfer is concerned."""

    model: str
    tp: int = 1
    block_size: int | None = None
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    mamba_cache_dtype: str = "auto"
    mamba_ssm_cache_dtype: str = "auto"
    attention_backend: str | None = None        # None: vLLM's choice (FLASH_ATTN on Hopper); also -ac backend
    prefix_caching: bool | None = None          # None: vLLM's default (on for hybrid models)
    num_speculative_tokens: int = 0
    speculative_method: str | None = None
    kv_connector: str | None = None
    kv_role: str | None = None
    hf_overrides: Mapping[str, Any] = field(default_factory=dict)
    gdn_prefill_backend: str | None = None      # --gdn-prefill-backend, else --additional-config's; None: auto
    speculative: Mapping[str, Any] = field(default_factory=dict)    # --speculative-config, whole
    kv_transfer: Mapping[str, Any] = field(default_factory=dict)    # --kv-transfer-config, whole
    attention_config: Mapping[str, Any] = field(default_factory=dict)   # --attention-config / -ac
    kv_buffer_device: str | None = None         # kv_transfer_config.kv_buffer_device; None: the GPU ("cuda")
    enforce_handshake_compat: bool = True       # kv_connector_extra_config.enforce_handshake_compat
    enable_permute_local_kv: bool = False       # kv_transfer_config.enable_permute_local_kv
    disable_hybrid_kv_cache_manager: bool | None = None   # None: vLLM decides (on with NIXL)
    use_replayssm: bool = False                 # --use-replayssm (refused beside a KV connector)
    dcp: int = 1                                # --decode-context-parallel-size / -dcp
    mamba_backend: str = "triton"               # --mamba-backend (vLLM's MambaBackendEnum, lower case)
    replayssm_buffer_len: int = DEFAULT_REPLAYSSM_BUFFER_LEN   # --replayssm-buffer-len
    mamba_cache_mode: str | None = None         # --mamba-cache-mode (None: vLLM's, from prefix caching)
    pipeline: int = 1                           # --pipeline-parallel-size / -pp
    mamba_stochastic_rounding: bool = False     # --enable-mamba-cache-stochastic-rounding
    conv_layout: str | None = None              # VLLM_SSM_CONV_STATE_LAYOUT as the engine sees it
    kv_cache_layout: str | None = None          # VLLM_KV_CACHE_LAYOUT as the engine sees it
    env_prefix: tuple[tuple[str, str], ...] = ()   # VAR=value words before the command
    words: tuple[str, ...] = ()                 # the command itself: vllm serve MODEL ...
    occurrences: Mapping[str, tuple[Occurrence, ...]] = field(default_factory=dict)  # by field
    ignored: tuple[str, ...] = ()               # flags read past: they do not affect the transfer
    unknown: tuple[str, ...] = ()               # flags no vLLM release mambaxfer knows has
    release_only: tuple[tuple[str, tuple[str, ...]], ...] = ()   # (flag, the releases that know it)
    notes: tuple[str, ...] = ()                 # other remarks (unexported variables, ...)
    origin: str = ""                            # the option that gave the line (--decode-file F)

    @property
    def transfer_mode(self) -> str | None:
        if self.kv_connector is None:
            return None
        return "push" if self.kv_connector == PUSH_CONNECTOR else "pull"

    def exported(self) -> tuple[tuple[str, str | None], ...]:
        return (CONV_LAYOUT_VAR, self.conv_layout), (KV_LAYOUT_VAR, self.kv_cache_layout)


LAYOUT_VARS = (CONV_LAYOUT_VAR, KV_LAYOUT_VAR)


def parse_serve(text: str, where: str = "--prefill", environ: Mapping[str, str] | None = None) -> ServeLine:
    """One engine's ``vllm serve`` line from a command line or a shell script; ``environ``: what
    the engine inherits besides the script's (none by default: a line is judged as written)."""
    return read_server(text, where, environ, "vLLM", lambda words: server_start(words, "vllm", API_SERVER_MODULE),
                       f"'vllm serve MODEL ...' (or 'python -m {API_SERVER_MODULE} --model M')", LAYOUT_VARS,
                       lambda found, notes: replace(_parse_words(found.words, found.assigns, found.environment,
                                                                 where, notes), origin=where))


def reparse(line: ServeLine, words: list[str], env_prefix: tuple[tuple[str, str], ...], where: str) -> ServeLine:
    """The same engine with its words or env prefixes edited (a corrected line)."""
    env = {name: value for name, value in line.exported() if value is not None} | dict(env_prefix)
    return _parse_words(list(words), list(env_prefix), env, where, line.kept_notes())


# --- vLLM's part -------------------------------------------------------------------------------

def _parse_words(words: list[str], assigns, env: Mapping[str, str], where: str, notes) -> ServeLine:
    serve = words[1] == "serve"
    i = 2 if serve else 3          # vllm serve ... | python -m vllm.entrypoints.openai.api_server ...
    parsed = Parsed(where, SAID, list(notes))
    values, release_only = parsed.values, []
    dotted: dict[str, dict] = {}
    positional = None
    while i < len(words):
        word = words[i]
        if not word.startswith("-") or word == "-":
            if serve and positional is None:
                positional = word
                parsed.at("model", word, i, i + 1)
                i += 1
                continue
            raise UserError(f"{where}: unexpected argument {quoted(word)} (vllm serve takes one model)")
        if word.startswith("-O") and word != "-O" or (word == "-O" and words[i + 1:i + 2] in (["0"], ["1"], ["2"],
                                                                                             ["3"])):
            parsed.ignored.append("--optimization-level")       # -O3, -O=3, -O 3: FlexibleArgumentParser's forms
            i += 2 if word == "-O" else 1
            continue
        name, eq, value_after = word.partition("=")
        inline = value_after if eq else None
        if name.startswith("--"):          # underscores in the option's name, not in a JSON sub-key
            head, dot, tail = name[2:].partition(".")
            name = "--" + head.replace("_", "-") + dot + tail
        base, _, sub = name.partition(".")
        known = looked_up(resolve, base, where)
        if known is None:
            i = parsed.unrecognized(name, inline, words, i)
            continue
        if known.releases != NAMES:
            release_only.append((known.spelling, known.releases))
        key = TRANSFER_FIELDS.get(known.dest)
        if sub:                      # --flag.key[.key...]=value: one key of a JSON flag
            end = i + 1
            if inline is not None:
                value: Any = inline
            elif end < len(words):
                value, end = words[end], end + 1
            else:
                raise UserError(f"{where}: {name} expects a value")
            if key in JSON_FIELDS:
                _set_dotted(dotted.setdefault(key, {}), sub, value, name, where)
                parsed.at(key, name, i, end)
            else:
                parsed.ignored.append(known.spelling)
            i = end
            continue
        value, end = parsed.option(words, i, name, inline, known.spelling, known.dest, known.takes, key)
        if known.takes not in SETS and known.takes != OPTIONAL:
            _check_choice(known, str(value), name, where, release_only)
        if known.releases != NAMES:     # where a release that lacks it stops
            parsed.at(UNKNOWN + known.spelling, name, i, end)
        i = end
    flagged = values.pop("model", None)        # --model, which a positional model overrides
    model = flagged if positional is None else positional
    if model is None:
        raise UserError(f"{where}: no model: write 'vllm serve MODEL ...'")
    for key in dotted:
        if key in values:
            parsed.notes.append(f"{FLAG[key]} is given whole and as dotted keys: vLLM keeps only the dotted "
                                f"keys (it passes them last, and the last value wins)")
    fields = _fields(values, dotted, where)
    release_only += _release_keys(fields)
    return ServeLine(model=model, conv_layout=env.get(CONV_LAYOUT_VAR), kv_cache_layout=env.get(KV_LAYOUT_VAR),
                     env_prefix=tuple(assigns), words=tuple(words), release_only=tuple(dict.fromkeys(release_only)),
                     **parsed.lists(), **fields)


def _check_choice(known: Known, value: str, name: str, where: str, release_only: list) -> None:
    """argparse's choices, per release: refused when no release accepts the value, noted when
    only some do."""
    if not known.choices:
        return
    accepting = tuple(r for r in known.releases if value in known.choices.get(r, (value,)))
    if not accepting:
        union = dict.fromkeys(c for r in known.releases for c in known.choices.get(r, ()))
        raise UserError(f"{where}: {invalid_choice(name, value, union)}")
    if accepting != known.releases:
        release_only.append((f"{known.spelling} {value}", accepting))


# --- JSON values, bounded --------------------------------------------------------------------

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)


def _depth(text: str) -> int:
    """How deep '[' and '{' nest outside JSON strings."""
    depth = deepest = 0
    for m in re.finditer(r"[\[\]{}]", _STRINGS.sub("", text)):
        depth += 1 if m.group() in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _bounded_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_JSON_INT_DIGITS:
        raise _TooLong(len(digits.lstrip("-")))
    return int(digits)


class _TooLong(Exception):
    pass


def load_json(value: str, flag: str, where: str) -> Any:
    """``json.loads`` of a flag's value, as vLLM reads it, within MAX_NESTING levels,
    MAX_JSON_INT_DIGITS digits per integer and MAX_NODES values; else one UserError."""
    if _depth(value) > MAX_NESTING:
        raise UserError(f"{where}: {flag} is nested more than {MAX_NESTING} levels deep; no engine setting is")
    try:
        data = json.loads(value, parse_int=_bounded_int)
    except _TooLong as exc:
        raise UserError(f"{where}: {flag} holds an integer of {exc.args[0]} digits; no engine setting is that "
                        f"large") from None
    except RecursionError:
        raise UserError(f"{where}: {flag} is nested too deeply; no engine setting is") from None
    check_document(data, f"{where}: {flag}")
    return data


def _json(value: str, flag: str, where: str) -> dict:
    try:
        data = load_json(value, flag, where)
    except json.JSONDecodeError as exc:
        raise UserError(f"{where}: {flag} is not valid JSON ({exc.msg}): {quoted(value)}") from None
    if not isinstance(data, dict):
        raise UserError(f"{where}: {flag} must be a JSON object, got {quoted(value)}")
    return data


def _dotted_value(raw: str, flag: str, where: str) -> Any:
    """A dotted key's value as FlexibleArgumentParser reads it: JSON, else a human-readable
    integer ('1k', '2G'), else the text itself."""
    try:
        return load_json(raw, flag, where)
    except json.JSONDecodeError:
        pass
    m = re.fullmatch(r"\s*(\d{1,30}(?:\.\d{1,30})?)([kKmMgGtT])\s*", raw)
    if m:
        number, suffix = m.groups()
        if suffix.islower():
            return int(float(number) * 10 ** (3 * "kmgt".index(suffix) + 3))
        if "." not in number:
            return int(number) * 2 ** (10 * "KMGT".index(suffix) + 10)
    return raw


def _set_dotted(target: dict, sub: str, raw: str, flag: str, where: str) -> None:
    """``--flag.a.b=v`` as vLLM nests it (``create_nested_dict``) merged into ``target``
    (``recursive_dict_update``); ``a.b+`` takes a comma-separated list of strings."""
    keys = sub.split(".")
    if len(keys) > MAX_NESTING:
        raise UserError(f"{where}: {flag} names keys more than {MAX_NESTING} levels deep; no engine setting does")
    if keys[-1].endswith("+"):
        keys[-1] = keys[-1][:-1]
        value: Any = raw.split(",")
    else:
        value = _dotted_value(raw, flag, where)
    for key in reversed(keys[1:]):
        value = {key: value}
    _merge(target, {keys[0]: value})


def _merge(original: dict, update: dict) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(original.get(key), dict):
            _merge(original[key], value)
        elif isinstance(value, list) and isinstance(original.get(key), list):
            original[key] = original[key] + value
        else:
            original[key] = value


def _config(values: dict, dotted: dict, key: str, where: str) -> dict:
    """A JSON flag's value: its dotted keys when it has any (vLLM appends them after the whole
    value, and argparse keeps the last), else its whole JSON."""
    if key in dotted:
        return dotted[key]
    return _json(values[key], FLAG[key], where) if key in values else {}


# --- the fields --------------------------------------------------------------------------------

def _int(value: Any, flag: str, where: str, minimum: int = 1) -> int:
    text = str(value)
    if len(text) > MAX_JSON_INT_DIGITS:
        raise UserError(f"{where}: {flag} expects an integer, got {quoted(text)}")
    try:
        number = int(text, 10)
    except ValueError:
        raise UserError(f"{where}: {flag} expects an integer, got {quoted(text)}") from None
    if number < minimum:
        raise UserError(f"{where}: {flag} must be >= {minimum}, got {number}")
    if number > 1 << 20:
        raise UserError(f"{where}: {flag} {number} is larger than any engine uses")
    return number


_TRUE, _FALSE = ("1", "true", "t", "yes", "y", "on"), ("0", "false", "f", "no", "n", "off")


def _bool(value: Any, what: str, where: str) -> bool:
    """A boolean field of a vLLM config as pydantic reads it (lax: true/false, 0/1, yes/no, on/off)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise UserError(f"{where}: {what} must be a boolean, got {quoted(repr(value))}")


def _backend(name: Any, what: str, where: str) -> str | None:
    if name is None:
        return None
    if not isinstance(name, str):
        raise UserError(f"{where}: {what} must be a backend name, got {quoted(repr(name))}")
    return None if name.lower() == "auto" else name.upper()


def _mamba_backend(value: Any, where: str) -> str:
    backend = str(value).lower()
    if backend not in MAMBA_BACKENDS:      # MambaBackendEnum[value.upper()] (create_engine_config)
        raise UserError(f"{where}: --mamba-backend: vLLM does not start: Unknown Mamba SSU backend: "
                        f"{quoted(str(value).upper())}. Valid options are: "
                        f"{', '.join(b.upper() for b in MAMBA_BACKENDS)}")
    return backend


def _fields(values: dict, dotted: dict, where: str) -> dict:
    def number(flag: str):
        return lambda value: _int(value, flag, where)

    read = {"tp": number("--tensor-parallel-size"), "block_size": number("--block-size"),
            **dict.fromkeys(("dtype", "kv_cache_dtype", "mamba_cache_dtype", "mamba_ssm_cache_dtype"),
                            lambda value: str(value).lower()),
            "attention_backend": lambda value: _backend(str(value), "--attention-backend", where),
            **dict.fromkeys(("prefix_caching", "disable_hybrid_kv_cache_manager", "use_replayssm",
                             "mamba_stochastic_rounding"), bool),
            "dcp": number("--decode-context-parallel-size"),
            "mamba_backend": lambda value: _mamba_backend(value, where),
            "replayssm_buffer_len": number("--replayssm-buffer-len"), "mamba_cache_mode": str,
            "pipeline": number("--pipeline-parallel-size")}
    out: dict[str, Any] = {key: reader(values[key]) for key, reader in read.items() if key in values}
    spec = _config(values, dotted, "speculative_config", where)
    if spec:
        n = spec.get("num_speculative_tokens", 0)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise UserError(f"{where}: --speculative-config: num_speculative_tokens must be a non-negative "
                            f"integer, got {quoted(repr(n))}")
        out["num_speculative_tokens"] = _int(n, "num_speculative_tokens", where, 0)
        out["speculative"] = spec
        out["speculative_method"] = str(spec["method"]) if spec.get("method") is not None else None
    transfer = _config(values, dotted, "kv_transfer_config", where)
    if transfer:
        out.update(_transfer_fields(transfer, where))
    out["hf_overrides"] = _config(values, dotted, "hf_overrides", where)
    attention = out["attention_config"] = _config(values, dotted, "attention_config", where)
    chosen = _backend(attention.get("backend"), "--attention-config backend", where)
    if chosen is not None and "attention_backend" in values:
        # vLLM's create_engine_config, when both are given (an 'auto' backend counts as given there)
        raise UserError(f"{where}: attention_backend and attention_config.backend are mutually exclusive "
                        f"(vLLM refuses to start; give one of --attention-backend, --attention-config)")
    if chosen is not None:
        out["attention_backend"] = chosen
    additional = _config(values, dotted, "additional_config", where)
    gdn = values.get("gdn_prefill_backend", additional.get("gdn_prefill_backend"))
    if gdn is not None:             # --gdn-prefill-backend wins: vLLM writes it into additional_config
        name = str(gdn).strip().lower()         # _resolve_gdn_prefill_backend reads it so
        out["gdn_prefill_backend"] = None if name == "auto" else name
    return out


def _transfer_fields(transfer: dict, where: str) -> dict:
    connector = transfer.get("kv_connector")
    role = transfer.get("kv_role")
    if connector is not None and not isinstance(connector, str):
        raise UserError(f"{where}: --kv-transfer-config: kv_connector must be a string, got {quoted(repr(connector))}")
    if connector is not None and role is None:
        raise UserError(f"{where}: --kv-transfer-config: Please specify kv_role when kv_connector is set, "
                        f"supported roles are {', '.join(KV_ROLES)}")
    if role is not None and role not in KV_ROLES:
        raise UserError(f"{where}: --kv-transfer-config: kv_role must be one of {', '.join(KV_ROLES)}, "
                        f"got {quoted(repr(role))}")
    out: dict[str, Any] = {"kv_connector": connector, "kv_role": role, "kv_transfer": transfer}
    device = transfer.get("kv_buffer_device")
    if device is not None:
        if not isinstance(device, str):
            raise UserError(f"{where}: --kv-transfer-config: kv_buffer_device must be a string, got "
                            f"{quoted(repr(device))}")
        out["kv_buffer_device"] = device
    if "enable_permute_local_kv" in transfer:
        out["enable_permute_local_kv"] = _bool(transfer["enable_permute_local_kv"],
                                               "--kv-transfer-config: enable_permute_local_kv", where)
    extra = transfer.get("kv_connector_extra_config", {})
    if not isinstance(extra, dict):
        raise UserError(f"{where}: --kv-transfer-config: kv_connector_extra_config must be a JSON object, got "
                        f"{quoted(repr(extra))}")
    if "enforce_handshake_compat" in extra:        # get_from_extra_config(..., True): Python truth
        out["enforce_handshake_compat"] = bool(extra["enforce_handshake_compat"])
    return out


def _release_keys(fields: dict) -> list[tuple[str, tuple[str, ...]]]:
    """JSON keys that only some releases read (RELEASE_KEYS), where the line sets them."""
    out: list[tuple[str, tuple[str, ...]]] = []
    for (key, *path), releases in RELEASE_KEYS.items():
        node: Any = {"kv_transfer_config": fields.get("kv_transfer")}.get(key)
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            out.append((f"{FLAG[key]} {'.'.join(path)}", releases))
    return out
