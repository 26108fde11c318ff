"""Read a ``vllm serve`` command line (or a shell script that runs one) as vLLM 0.33 would.

Pure: text in, one frozen ``ServeLine`` out. The shell's part (quotes, line continuations,
``VAR=value`` prefixes, ``export`` lines) is shlex's; vLLM's part (``--flag=value``, underscores
in flag names, ``--no-``/``--disable-`` forms of booleans, dotted JSON sub-keys) follows
``FlexibleArgumentParser``. Flags are data: each row says what a flag is called, whether it takes
a value, and which field it feeds (none: it does not affect the transfer).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Mapping

from mambaxfer_cli.errors import UserError

CONV_LAYOUT_VAR = "VLLM_SSM_CONV_STATE_LAYOUT"
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
MAMBA_DTYPES = ("auto", "bfloat16", "float16", "float32")
MODEL_DTYPES = ("auto", "bfloat16", "float", "float16", "float32", "half")
KV_ROLES = ("kv_producer", "kv_consumer", "kv_both")
PUSH_CONNECTOR = "NixlPushConnector"
NIXL_CONNECTORS = ("NixlConnector", "NixlPullConnector", PUSH_CONNECTOR)

VALUE, BOOL, NONE, MANY, OPTIONAL = "value", "bool", "none", "many", "optional"


@dataclass(frozen=True)
class Flag:
    name: str                      # the long spelling, e.g. --block-size
    kind: str = VALUE              # value | bool (--x/--no-x) | none (store_true) | many | optional
    field: str | None = None       # the ServeLine field it feeds; None: ignored (not the transfer's)
    aliases: tuple[str, ...] = ()
    choices: tuple[str, ...] = ()


TRANSFER_FLAGS = (
    Flag("--model", field="model"),
    Flag("--tensor-parallel-size", field="tp", aliases=("-tp",)),
    Flag("--block-size", field="block_size"),
    Flag("--dtype", field="dtype", choices=MODEL_DTYPES),
    Flag("--kv-cache-dtype", field="kv_cache_dtype"),
    Flag("--mamba-cache-dtype", field="mamba_cache_dtype", choices=MAMBA_DTYPES),
    Flag("--mamba-ssm-cache-dtype", field="mamba_ssm_cache_dtype", choices=MAMBA_DTYPES),
    Flag("--attention-backend", field="attention_backend"),
    Flag("--enable-prefix-caching", BOOL, field="prefix_caching"),
    Flag("--speculative-config", field="speculative_config", aliases=("-sc",)),
    Flag("--kv-transfer-config", field="kv_transfer_config"),
    Flag("--hf-overrides", field="hf_overrides"),
    Flag("--gdn-prefill-backend", field="gdn_prefill_backend",
         choices=("flashinfer", "triton", "cutedsl", "aiter_flydsl", "sycl", "hip")),
    Flag("--additional-config", field="additional_config"),
)

# vLLM's other common serve flags: read past, listed as ignored (flags new in a release are the
# release's data: planning/releases).
_IGNORED_VALUE = (
    "--tokenizer --tokenizer-mode --revision --code-revision --tokenizer-revision --hf-config-path --seed "
    "--max-model-len --quantization --max-logprobs --download-dir --load-format --config-format "
    "--generation-config --override-generation-config --pipeline-parallel-size --data-parallel-size "
    "--data-parallel-size-local --data-parallel-rank --data-parallel-start-rank --data-parallel-address "
    "--data-parallel-rpc-port --data-parallel-backend --decode-context-parallel-size "
    "--prefill-context-parallel-size --distributed-executor-backend --nnodes --node-rank --master-addr "
    "--master-port --gpu-memory-utilization --device-memory-utilization --kv-cache-memory-bytes "
    "--num-gpu-blocks-override --prefix-caching-hash-algo --max-num-batched-tokens --max-num-seqs "
    "--scheduling-policy --compilation-config --optimization-level --attention-config "
    "--limit-mm-per-prompt --mm-processor-kwargs --max-loras --max-lora-rank --cpu-offload-gb "
    "--reasoning-parser --tool-call-parser --chat-template --host --port --uds --uvicorn-log-level "
    "--allowed-origins --allowed-methods --allowed-headers --middleware --root-path --ssl-keyfile "
    "--ssl-certfile --ssl-ca-certs --max-log-len --api-server-count --config --logging-config --log-level "
    "--shutdown-timeout --kda-prefill-backend --kda-decode-backend --mamba-block-size "
    "--mamba-cache-mode --spec-method --spec-model --spec-tokens --swap-space --max-seq-len-to-capture "
    "--served-model-name --api-key --lora-modules"
).split()
_MANY = {"--served-model-name", "--api-key", "--lora-modules"}
_SHORT = {"-q": "--quantization", "-pp": "--pipeline-parallel-size", "-dp": "--data-parallel-size",
          "-dpl": "--data-parallel-size-local", "-dpn": "--data-parallel-rank",
          "-dpr": "--data-parallel-start-rank", "-dpa": "--data-parallel-address",
          "-dpp": "--data-parallel-rpc-port", "-dpb": "--data-parallel-backend",
          "-dcp": "--decode-context-parallel-size", "-pcp": "--prefill-context-parallel-size",
          "-n": "--nnodes", "-r": "--node-rank", "-cc": "--compilation-config", "-O": "--optimization-level",
          "-ac": "--attention-config", "-asc": "--api-server-count"}
_IGNORED_BOOL = (
    "--trust-remote-code --enforce-eager --enable-chunked-prefill --disable-hybrid-kv-cache-manager "
    "--async-scheduling --enable-expert-parallel --enable-eplb --enable-dbo --disable-custom-all-reduce "
    "--disable-sliding-window --skip-tokenizer-init --enable-prompt-embeds --enable-sleep-mode --enable-lora "
    "--enable-log-requests --enable-auto-tool-choice --disable-uvicorn-access-log --disable-fastapi-docs "
    "--enable-request-id-headers --allow-credentials --fail-on-environ-validation --disable-cascade-attn "
    "--use-replayssm --enable-mamba-shared-prefix-checkpoint"
).split()
_IGNORED_NONE = "--disable-log-stats --aggregate-engine-logging --headless --grpc".split()

FLAGS: tuple[Flag, ...] = TRANSFER_FLAGS + tuple(
    Flag(name, MANY if name in _MANY else VALUE, aliases=tuple(s for s, long in _SHORT.items() if long == name))
    for name in _IGNORED_VALUE) + tuple(Flag(n, BOOL, aliases=("-ep",) if n == "--enable-expert-parallel" else ())
                                        for n in _IGNORED_BOOL) + tuple(
    Flag(n, NONE) for n in _IGNORED_NONE) + (Flag("--hf-token", OPTIONAL),
                                             Flag("--data-parallel-multi-port-external-lb", NONE, aliases=("-dpm",)))


def _spellings() -> dict[str, tuple[Flag, bool]]:
    """Every accepted spelling -> (flag, the value a bare boolean spelling sets)."""
    out: dict[str, tuple[Flag, bool]] = {}
    for flag in FLAGS:
        for name in (flag.name, *flag.aliases):
            out[name] = (flag, True)
        if flag.kind == BOOL:
            stem = flag.name[2:]
            out[f"--no-{stem}"] = (flag, False)
            for a, b in (("enable-", "disable-"), ("disable-", "enable-")):
                if stem.startswith(a):
                    out[f"--{b}{stem[len(a):]}"] = (flag, False)
                    out[f"--no-{b}{stem[len(a):]}"] = (flag, True)
    return out


SPELLINGS = _spellings()


@dataclass(frozen=True)
class Occurrence:
    """Where a flag sits in the command's words: words[start:end]; ``inline`` for --flag=value."""

    spelling: str
    start: int
    end: int


@dataclass(frozen=True)
class ServeLine:
    """One engine's command line, as far as the transfer is concerned."""

    model: str
    tp: int = 1
    block_size: int | None = None
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    mamba_cache_dtype: str = "auto"
    mamba_ssm_cache_dtype: str = "auto"
    attention_backend: str | None = None        # None: vLLM's choice (FLASH_ATTN on Hopper)
    prefix_caching: bool | None = None          # None: vLLM's default (on for hybrid models)
    num_speculative_tokens: int = 0
    speculative_method: str | None = None
    kv_connector: str | None = None
    kv_role: str | None = None
    hf_overrides: Mapping[str, Any] = field(default_factory=dict)
    gdn_prefill_backend: str | None = None      # --gdn-prefill-backend, else --additional-config's
    additional_config: Mapping[str, Any] = field(default_factory=dict)   # --additional-config, whole
    speculative: Mapping[str, Any] = field(default_factory=dict)    # --speculative-config, whole
    kv_transfer: Mapping[str, Any] = field(default_factory=dict)    # --kv-transfer-config, whole
    conv_layout: str | None = None              # VLLM_SSM_CONV_STATE_LAYOUT as the engine sees it
    env_prefix: tuple[tuple[str, str], ...] = ()   # VAR=value words before the command
    words: tuple[str, ...] = ()                 # the command itself: vllm serve MODEL ...
    occurrences: Mapping[str, tuple[Occurrence, ...]] = field(default_factory=dict)  # by field
    ignored: tuple[str, ...] = ()               # flags read past: they do not affect the transfer
    unknown: tuple[str, ...] = ()               # flags vLLM 0.33 does not have (as far as we know)
    notes: tuple[str, ...] = ()                 # other remarks (unexported variables, ...)

    @property
    def transfer_mode(self) -> str | None:
        if self.kv_connector is None:
            return None
        return "push" if self.kv_connector == PUSH_CONNECTOR else "pull"

    @property
    def speculative_config(self) -> str | None:
        occ = self.occurrences.get("speculative_config")
        return None if not occ else _value_of(self.words, occ[-1])

    def environment(self) -> tuple[tuple[str, str], ...]:
        """The prefixes a pasted line needs: its own, and the conv layout a script exported."""
        own = tuple(self.env_prefix)
        if self.conv_layout is not None and CONV_LAYOUT_VAR not in dict(own):
            own = ((CONV_LAYOUT_VAR, self.conv_layout),) + own
        return own

    def command(self) -> str:
        """The command as one line a shell reads back the same (env prefixes first)."""
        return shlex.join([f"{k}={v}" for k, v in self.environment()] + list(self.words))


def _value_of(words, occ: Occurrence) -> str:
    word = words[occ.start]
    return word.split("=", 1)[1] if occ.end == occ.start + 1 and "=" in word else words[occ.start + 1]


_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)


def _split(text: str, where: str) -> list[list[str]]:
    """The script's simple commands, each its words (quotes removed, continuations joined)."""
    commands = []
    try:
        for line in _logical_lines(re.sub(r"\\\r?\n", " ", text)):
            lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
            lexer.whitespace_split = True
            lexer.commenters = "#"
            current: list[str] = []
            for word in lexer:
                if word in (";", "&&", "||", "&", "|", ";;"):
                    if current:
                        commands.append(current)
                    current = []
                else:
                    current.append(word)
            if current:
                commands.append(current)
    except ValueError as exc:
        raise UserError(f"{where}: cannot read the command line: {exc} (an unclosed quote?)") from None
    return commands


def _logical_lines(text: str) -> list[str]:
    """Split at newlines outside quotes (a quoted JSON value may span lines)."""
    lines, current, quote = [], [], None
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and quote == '"' and i + 1 < len(text):
                current.append(text[i:i + 2])
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (not current or current[-1][-1:] in " \t;"):   # a comment, to the line's end
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        elif ch == "\\" and i + 1 < len(text):
            current.append(text[i:i + 2])
            i += 2
            continue
        elif ch == "\n":
            lines.append("".join(current))
            current = []
            i += 1
            continue
        current.append(ch)
        i += 1
    lines.append("".join(current))
    return lines


def _serve_start(words: list[str]) -> int | None:
    """Index of the words that start vLLM's server: ``vllm serve`` or ``python -m <api_server>``."""
    for i, word in enumerate(words):
        base = word.rsplit("/", 1)[-1]
        if base == "vllm" and i + 1 < len(words) and words[i + 1] == "serve":
            return i
        if word == "-m" and i + 1 < len(words) and words[i + 1] == API_SERVER_MODULE and i > 0:
            return i - 1
    return None


def _shown(value: str) -> str:
    """A value quoted in an error message: escaped, and cut to its start when long."""
    return repr(value) if len(value) <= 60 else f"{value[:40]!r}... ({len(value)} characters)"


def parse_serve(text: str, where: str = "--prefill", environ: Mapping[str, str] | None = None) -> ServeLine:
    """One engine's ``vllm serve`` line from a command line or a shell script (see ``_parse``)."""
    try:
        return _parse(text, where, environ)
    except UserError as exc:     # one line, whatever the input held
        raise UserError(" ".join(str(exc).split())) from None


def _parse(text: str, where: str, environ: Mapping[str, str] | None) -> ServeLine:
    """One engine's ``vllm serve`` line from a command line or a shell script.

    ``environ``: variables the engine inherits besides the script's (none by default: a command
    line is judged as written)."""
    env = dict(environ or {})
    shell_vars: dict[str, str] = {}
    notes: list[str] = []
    found = None
    for words in _split(text, where):
        if words[0] == "export":
            for word in words[1:]:
                m = _ASSIGN.match(word)
                if m:
                    env[m.group(1)] = m.group(2)
                elif word in shell_vars:
                    env[word] = shell_vars[word]
            continue
        if words[0] == "unset":
            for word in words[1:]:
                env.pop(word, None)
            continue
        start = _serve_start(words)
        prefix = words[:start] if start is not None else words
        assigns = [(m.group(1), m.group(2)) for m in map(_ASSIGN.match, prefix) if m]
        if start is None:
            if words and len(assigns) == len(words):       # VAR=value on its own: a shell variable
                shell_vars.update(assigns)
            continue
        if found is not None:
            raise UserError(f"{where}: the script runs vLLM's server twice; give one engine per line or file")
        found = (words[start:], assigns)
    if found is None:
        raise UserError(f"{where}: no 'vllm serve MODEL ...' (or 'python -m {API_SERVER_MODULE} --model M') "
                        f"found")
    words, assigns = found
    for name, value in shell_vars.items():
        if name == CONV_LAYOUT_VAR and name not in env and name not in dict(assigns):
            notes.append(f"{name}={value} is set but not exported, so vLLM does not see it")
    line_env = {**env, **dict(assigns)}
    return _parse_words(words, assigns, line_env, where, tuple(notes))


def reparse(line: ServeLine, words: list[str], env_prefix: tuple[tuple[str, str], ...], where: str) -> ServeLine:
    """The same engine with its words or env prefixes edited (a corrected line)."""
    env = {CONV_LAYOUT_VAR: line.conv_layout} if line.conv_layout is not None else {}
    env.update(dict(env_prefix))
    return _parse_words(list(words), list(env_prefix), env, where, line.notes)


def _parse_words(words: list[str], assigns, env: Mapping[str, str], where: str, notes) -> ServeLine:
    serve = words[1] == "serve"
    i = 2 if serve else 3          # vllm serve ... | python -m vllm.entrypoints.openai.api_server ...
    values: dict[str, Any] = {}
    occurrences: dict[str, list[Occurrence]] = {}
    ignored, unknown = [], []
    dotted: dict[str, dict] = {}
    positional = None
    while i < len(words):
        word = words[i]
        if not word.startswith("-") or word == "-":
            if serve and positional is None:
                positional = word
                occurrences.setdefault("model", []).append(Occurrence(word, i, i + 1))
                i += 1
                continue
            raise UserError(f"{where}: unexpected argument {_shown(word)} (vllm serve takes one model)")
        name, inline = (word.split("=", 1) + [None])[:2] if "=" in word else (word, None)
        if name.startswith("--"):          # underscores in the option's name, not in a JSON sub-key
            head, dot, tail = name[2:].partition(".")
            name = "--" + head.replace("_", "-") + dot + tail
        if re.fullmatch(r"-O\d", word):
            ignored.append(word)
            i += 1
            continue
        base, _, sub = name.partition(".")
        spelled = SPELLINGS.get(base)
        if spelled is None:
            unknown.append(name)
            takes = inline is None and i + 1 < len(words) and not words[i + 1].startswith("-")
            i += 1 + (1 if takes else 0)
            continue
        flag, setting = spelled
        end = i + 1
        if flag.kind in (BOOL, NONE):
            if inline is not None:
                raise UserError(f"{where}: {name} takes no value (got {_shown(word)})")
            value: Any = setting
        elif flag.kind == OPTIONAL:
            value = inline
            if inline is None and end < len(words) and not words[end].startswith("-"):
                end += 1
        else:
            if inline is not None:
                value = inline
            elif end < len(words) and not (words[end].startswith("-") and not _negative_number(words[end])):
                value = words[end]
                end += 1
            else:
                raise UserError(f"{where}: {name} expects a value")
            if flag.kind == MANY:
                while end < len(words) and not words[end].startswith("-"):
                    end += 1
        if flag.field is None:
            ignored.append(flag.name)
        elif sub:
            dotted.setdefault(flag.field, {})[sub] = value
            occurrences.setdefault(flag.field, []).append(Occurrence(name, i, end))
        else:
            if flag.choices and value not in flag.choices:
                raise UserError(f"{where}: {name}: invalid choice {_shown(value)} (choose from "
                                f"{', '.join(flag.choices)})")
            values[flag.field] = value
            occurrences.setdefault(flag.field, []).append(Occurrence(name, i, end))
        i = end
    model = values.pop("model", None) if positional is None else positional
    if positional is not None and "model" in values:
        values.pop("model")
    if model is None:
        raise UserError(f"{where}: no model: write 'vllm serve MODEL ...'")
    fields = _fields(values, dotted, where)
    layout = env.get(CONV_LAYOUT_VAR)
    return ServeLine(model=model, conv_layout=layout, env_prefix=tuple(assigns), words=tuple(words),
                     occurrences={k: tuple(v) for k, v in occurrences.items()}, ignored=tuple(dict.fromkeys(ignored)),
                     unknown=tuple(dict.fromkeys(unknown)), notes=notes, **fields)


def _negative_number(word: str) -> bool:
    return re.fullmatch(r"-\d+(\.\d+)?", word) is not None


def _json(value: str, flag: str, where: str) -> dict:
    try:
        data = json.loads(value)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise UserError(f"{where}: {flag} is not valid JSON ({getattr(exc, 'msg', exc)}): {_shown(value)}") from None
    if not isinstance(data, dict):
        raise UserError(f"{where}: {flag} must be a JSON object, got {_shown(value)}")
    return data


def _int(value: Any, flag: str, where: str, minimum: int = 1) -> int:
    try:
        number = int(str(value), 10)
    except ValueError:
        raise UserError(f"{where}: {flag} expects an integer, got {_shown(str(value))}") from None
    if number < minimum:
        raise UserError(f"{where}: {flag} must be >= {minimum}, got {number}")
    if number > 1 << 20:
        raise UserError(f"{where}: {flag} {number} is larger than any engine uses")
    return number


def _config(values: dict, dotted: dict, key: str, flag: str, where: str) -> dict:
    data = _json(values[key], flag, where) if key in values else {}
    for sub, raw in dotted.get(key, {}).items():
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            parsed = raw
        data[sub] = parsed
    return data


def _fields(values: dict, dotted: dict, where: str) -> dict:
    out: dict[str, Any] = {}
    if "tp" in values:
        out["tp"] = _int(values["tp"], "--tensor-parallel-size", where)
    if "block_size" in values:
        out["block_size"] = _int(values["block_size"], "--block-size", where)
    for key in ("dtype", "kv_cache_dtype", "mamba_cache_dtype", "mamba_ssm_cache_dtype"):
        if key in values:
            out[key] = str(values[key]).lower()
    if "attention_backend" in values:
        name = str(values["attention_backend"])
        out["attention_backend"] = None if name.lower() == "auto" else name.upper()
    if "prefix_caching" in values:
        out["prefix_caching"] = bool(values["prefix_caching"])
    spec = _config(values, dotted, "speculative_config", "--speculative-config", where)
    if spec:
        n = spec.get("num_speculative_tokens", 0)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise UserError(f"{where}: --speculative-config: num_speculative_tokens must be a non-negative "
                            f"integer, got {n!r}")
        out["num_speculative_tokens"] = _int(n, "num_speculative_tokens", where, 0)
        out["speculative"] = spec
        out["speculative_method"] = str(spec["method"]) if spec.get("method") is not None else None
    transfer = _config(values, dotted, "kv_transfer_config", "--kv-transfer-config", where)
    if transfer:
        connector = transfer.get("kv_connector")
        role = transfer.get("kv_role")
        if connector is not None and not isinstance(connector, str):
            raise UserError(f"{where}: --kv-transfer-config: kv_connector must be a string, got {connector!r}")
        if connector is not None and role is None:
            raise UserError(f"{where}: --kv-transfer-config: Please specify kv_role when kv_connector is set, "
                            f"supported roles are {', '.join(KV_ROLES)}")
        if role is not None and role not in KV_ROLES:
            raise UserError(f"{where}: --kv-transfer-config: kv_role must be one of {', '.join(KV_ROLES)}, "
                            f"got {role!r}")
        out["kv_connector"], out["kv_role"], out["kv_transfer"] = connector, role, transfer
    overrides = _config(values, dotted, "hf_overrides", "--hf-overrides", where)
    if overrides:
        out["hf_overrides"] = overrides
    additional = _config(values, dotted, "additional_config", "--additional-config", where)
    if additional:
        out["additional_config"] = additional
    # EngineArgs copies --gdn-prefill-backend into additional_config, over what it held.
    gdn = values.get("gdn_prefill_backend", additional.get("gdn_prefill_backend"))
    if gdn is not None:
        out["gdn_prefill_backend"] = str(gdn).strip().lower()
    return out
