"""A shell script's commands read as bash runs them, what only running it gives kept as ``Unknown``;
then the half both engines' server-line readers share."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, NamedTuple, TypeVar

from mambaxfer_cli.errors import UserError, quoted

ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
PYTHON = re.compile(r"python(\d+(\.\d+)*)?")
ENV_OPTION = "--env"        # how a user gives what the script cannot tell

SEPARATORS = (";;", ";", "&&", "&", "||", "|&", "|", "(", ")")
REDIRECTS = ("&>>", "&>", ">>", ">&", ">|", "<<<", "<<-", "<<", "<&", "<>", ">", "<")
_OPERATORS = sorted(SEPARATORS + REDIRECTS, key=len, reverse=True)
_DECLARE = ("export", "declare", "typeset", "readonly", "local")
_OPS = (":-", ":=", ":+", ":?", "-", "=", "+", "?")
_ANSI = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
         "\\": "\\", "'": "'", '"': '"', "?": "?"}
_ANSI_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{1,2}|u[0-9a-fA-F]{1,4}|U[0-9a-fA-F]{1,8}|[0-7]{1,3}|.)", re.S)
_PLAIN = re.compile(r"[^ \t\r\n'\"\\$`;&|()<>]+")     # characters that stand for themselves
_PLAIN_QUOTED = re.compile(r'[^"\\$`\n]+')
UNCLOSED = "cannot read the command line: No closing quotation (an unclosed quote?)"


class Unknown(str):
    """A value known only by running the script (its text as written); ``why`` says how to give it."""

    why: str = ""


def unknown(text: str, why: str) -> Unknown:
    value = Unknown(text)
    value.why = why
    return value


T = TypeVar("T")


class _Stop(Exception):
    """An expansion that needs the script to run (its why)."""


# --- reading: words made of parts, commands made of words ------------------------------------------

@dataclass
class _Word:
    parts: list[tuple]       # ("lit", text) unquoted, ("q", text) quoted, ("var", name, op, arg, quoted),
    line: int                # ("unk", source, why-kind, quoted)
    source: str = ""


class _Reader:
    def __init__(self, text: str, where: str, line: int = 1) -> None:
        self.text, self.where, self.i, self.line = text, where, 0, line

    def fail(self, message: str) -> UserError:
        return UserError(f"{self.where}: {message}")

    def tokens(self) -> list[tuple[str, Any]]:
        """("word", _Word), ("op", operator) and ("nl", None) for each newline outside quotes."""
        t, n = self.text, len(self.text)
        out: list[tuple[str, Any]] = []
        parts: list[tuple] = []
        started, begin = False, 0
        heredoc: str | None = None               # << or <<- waiting for its delimiter word
        bodies: list[tuple[str, bool]] = []      # (delimiter, tabs stripped): skipped at the newline

        def end_word() -> None:
            nonlocal parts, started, heredoc
            if started:
                out.append(("word", _Word(parts, self.line, t[begin:self.i])))
                if heredoc is not None:
                    bodies.append(("".join(p[1] for p in parts if p[0] in ("lit", "q")), heredoc == "<<-"))
                    heredoc = None
            parts, started = [], False

        while self.i < n:
            ch = t[self.i]
            if not started:
                begin = self.i
            if ch == "\\" and (t.startswith("\n", self.i + 1) or t.startswith("\r\n", self.i + 1)):
                self.i += 2 if t[self.i + 1] == "\n" else 3    # a continuation: the line goes on
                self.line += 1
            elif ch in " \t\r":
                end_word()
                self.i += 1
            elif ch == "\n":
                end_word()
                out.append(("nl", None))
                self.line += 1
                self.i += 1
                for delimiter, tabs in bodies:          # a here-document's lines are no commands
                    self.skip_lines(delimiter, tabs)
                bodies.clear()
            elif ch == "#" and not started:                       # a comment ends at the newline
                while self.i < n and t[self.i] != "\n":
                    self.i += 1
            elif ch in ";&|()<>":
                op = next(o for o in _OPERATORS if t.startswith(o, self.i))
                if ch in "<>" and started and all(p[0] == "lit" for p in parts) \
                        and "".join(p[1] for p in parts).isdigit():
                    parts, started = [], False                    # the descriptor of this redirection
                end_word()
                out.append(("op", op))
                self.i += len(op)
                heredoc = op if op in ("<<", "<<-") else None
            else:
                parts.extend(self.part(quoted=False))
                started = True
        end_word()
        return out

    def skip_lines(self, delimiter: str, tabs: bool) -> None:
        """Past the line that is ``delimiter`` (leading tabs stripped for ``<<-``)."""
        t = self.text
        while self.i < len(t):
            end = t.find("\n", self.i)
            end = len(t) if end < 0 else end
            line, self.i = t[self.i:end], end + 1
            self.line += 1
            if (line.lstrip("\t") if tabs else line).rstrip("\r") == delimiter:
                return

    def part(self, quoted: bool) -> list[tuple]:
        """The parts at ``i`` (one quoted string, expansion or character), ``i`` moved past them."""
        t, i = self.text, self.i
        ch = t[i]
        lit = "q" if quoted else "lit"
        if ch == "'" and not quoted:
            close = t.find("'", i + 1)
            if close < 0:
                raise self.fail(UNCLOSED)
            self.line += t.count("\n", i, close)
            self.i = close + 1
            return [("q", t[i + 1:close])]
        if ch == '"' and not quoted:
            return self.double()
        if ch == "\\":
            self.i = i + 2
            return [("q", t[i + 1:i + 2] or "\\")]
        if ch == "`":
            j = self.i = self.escaped_to(i + 1, "`")
            return [("unk", t[i:j], "a command substitution", quoted)]
        if ch == "$":
            return self.dollar(quoted)
        m = _PLAIN.match(t, i) if not quoted else None
        self.i = m.end() if m else i + 1
        return [(lit, m.group() if m else ch)]

    def double(self) -> list[tuple]:
        t, n = self.text, len(self.text)
        self.i += 1
        parts: list[tuple] = [("q", "")]         # "" is a word of its own
        while self.i < n and t[self.i] != '"':
            ch = t[self.i]
            if ch == "\\" and self.i + 1 < n and t[self.i + 1] in '$`"\\\n':
                if t[self.i + 1] != "\n":
                    parts.append(("q", t[self.i + 1]))
                else:
                    self.line += 1
                self.i += 2
            elif ch in "$`":
                parts.extend(self.part(quoted=True))
            else:
                m = _PLAIN_QUOTED.match(t, self.i)
                run = m.group() if m else ch
                self.line += run.count("\n")
                parts.append(("q", run))
                self.i += len(run)
        if self.i >= n:
            raise self.fail(UNCLOSED)
        self.i += 1
        if any(p[0] == "var" and p[1] == "@" for p in parts):
            return parts[1:]                    # "$@" without arguments is no word at all
        return parts

    def escaped_to(self, j: int, quote: str) -> int:
        """The index past the ``quote`` that closes what starts at ``j`` (backslashes escape)."""
        t = self.text
        while j < len(t) and t[j] != quote:
            j += 2 if t[j] == "\\" else 1
        if j >= len(t):
            raise self.fail(UNCLOSED)
        return j + 1

    def closing(self, start: int, opening: str, closing: str) -> int:
        """The index of the ``closing`` that matches the ``opening`` at ``start`` (quotes skipped)."""
        t, depth, j = self.text, 0, start
        while j < len(t):
            ch = t[j]
            if ch == "\\":
                j += 2
                continue
            if ch in "'\"":
                close = t.find(ch, j + 1)
                if close < 0:
                    raise self.fail(UNCLOSED)
                j = close + 1
                continue
            if ch == opening:
                depth += 1
            elif ch == closing:
                depth -= 1
                if depth == 0:
                    return j
            j += 1
        raise self.fail(f"cannot read the command line: no closing '{closing}' after {quoted(t[start - 1:start + 20])}")

    def dollar(self, quoted_: bool) -> list[tuple]:
        t, i = self.text, self.i
        nxt = t[i + 1:i + 2]
        if nxt == "'" and not quoted_:                       # $'...': ANSI-C quoting
            self.i = self.escaped_to(i + 2, "'")
            return [("q", _ansi_c(t[i + 2:self.i - 1]))]
        if nxt == '"' and not quoted_:                       # $"...": a translated string, as "..."
            self.i = i + 1
            return self.double()
        if nxt == "(":
            end = self.closing(i + 1, "(", ")")
            self.i = end + 1
            kind = "arithmetic" if t.startswith("((", i + 1) else "a command substitution"
            return [("unk", t[i:end + 1], kind, quoted_)]
        if nxt == "{":
            end = self.closing(i + 1, "{", "}")
            self.i = end + 1
            return [self.braced(t[i + 2:end], t[i:end + 1], quoted_)]
        m = NAME.match(t, i + 1)
        if m:
            self.i = m.end()
            return [("var", m.group(), None, None, quoted_)]
        if nxt and (nxt.isdigit() or nxt in "@*#?$!-"):
            self.i = i + 2
            return [("var", nxt, None, None, quoted_)]
        self.i = i + 1
        return [("q" if quoted_ else "lit", "$")]

    def braced(self, inner: str, source: str, quoted_: bool) -> tuple:
        m = re.match(r"([A-Za-z_][A-Za-z0-9_]*|\d+|[@*#?$!-])", inner)
        rest = inner[m.end():] if m else inner
        op = next((o for o in _OPS if rest.startswith(o)), None) if rest else None
        if m is None or rest and op is None:
            return ("unk", source, "an expansion mambaxfer does not evaluate", quoted_)
        if op is None:
            return ("var", m.group(), None, None, quoted_)
        sub = _Reader(rest[len(op):], self.where, self.line)
        arg: list[tuple] = []
        while sub.i < len(sub.text):
            arg.extend(sub.part(quoted=quoted_))
        return ("var", m.group(), op, arg, quoted_)


def _ansi_c(body: str) -> str:
    """``$'...'`` as bash decodes it."""

    def escape(m: re.Match) -> str:
        e = m.group(1)
        if e[0] in "xuU" and len(e) > 1:
            return chr(min(int(e[1:], 16), 0x10FFFF))
        return chr(int(e, 8) & 0xFF) if e[0] in "01234567" else _ANSI.get(e, "\\" + e)

    return _ANSI_ESCAPE.sub(escape, body)


# --- expanding: a word into the fields bash makes of it ----------------------------------------

def _unset_why(name: str) -> str:
    if name.isdigit():
        return (f"${name} is the script's argument {name}, and preflight reads the script run without "
                f"arguments: give it a default in the script (${{{name}:-VALUE}})")
    if not NAME.fullmatch(name):
        return f"${name} is known only when the script runs; write the value instead"
    return f"${name} is set nowhere in the script and not in the environment: give it with {ENV_OPTION} {name}=VALUE"


def _known(value: str) -> str:
    if isinstance(value, Unknown):
        raise _Stop(value.why)
    return value


def _segments(parts: Iterable[tuple], values: dict[str, str], split_lit: bool = False) -> list[tuple[str, bool]]:
    """(text, whether bash splits it into words) for each part, variables expanded."""
    out: list[tuple[str, bool]] = []
    for part in parts:
        kind = part[0]
        if kind in ("lit", "q"):
            out.append((part[1], split_lit and kind == "lit"))
        elif kind == "unk":
            raise _Stop(f"{part[1]} is {part[2]}, known only by running the script: write its value instead, "
                        f"or set a variable to it and give that with {ENV_OPTION} NAME=VALUE", True)
        else:
            out.extend(_variable(part[1], part[2], part[3], part[4], values))
    return out


def _variable(name: str, op: str | None, arg: list[tuple] | None, inside: bool,
              values: dict[str, str]) -> list[tuple[str, bool]]:
    """``$name`` / ``${name<op><arg>}`` as bash expands it (``inside``: within double quotes)."""
    if name in "@*":
        return [("", True)]                   # preflight reads the script run without arguments
    if name == "#":
        return [("0", False)]
    value = values.get(name)
    if op is None:
        if value is None:
            raise _Stop(_unset_why(name))
        return [(_known(value), not inside)]
    colon, kind = op.startswith(":"), op[-1]
    if colon and isinstance(value, Unknown):
        raise _Stop(value.why)               # empty or not: known only by running it
    present = value is not None and (not colon or value != "")
    if kind == "+":
        return _segments(arg or [], values, not inside) if present else []
    if present:
        return [(_known(value), not inside)]  # type: ignore[arg-type]
    if kind == "?":
        raise _Stop(_unset_why(name))
    got = _segments(arg or [], values, not inside)
    if kind == "=":
        values[name] = "".join(text for text, _ in got)
    return got


def _fields(word: _Word, values: dict[str, str]) -> list[str]:
    """The words bash makes of ``word``: expanded, split where unquoted, empty ones dropped."""
    parts = word.parts
    first = parts[0][1] if parts[0][0] == "lit" else ""
    if first == "~" and parts[1:2] in ([], [("lit", "/")]) or first.startswith("~/"):
        if values.get("HOME") is None:
            raise _Stop(_unset_why("HOME"))
        parts = [("q", _known(values["HOME"])), ("lit", first[1:])] + parts[1:]
    fields: list[str] = []
    current: str | None = None
    for text, split in _segments(parts, values):
        if not split:
            current = (current or "") + text
            continue
        for piece in re.split(r"([ \t\n]+)", text):
            if piece and piece.isspace():
                if current is not None:
                    fields.append(current)
                current = None
            elif piece:
                current = (current or "") + piece
    if current is not None:
        fields.append(current)
    return fields


def _assignment(word: _Word) -> tuple[str, list[tuple]] | None:
    """(NAME, the value's parts) where bash takes ``word`` as an assignment: NAME= unquoted."""
    name: list[str] = []
    for k, part in enumerate(word.parts):
        if part[0] != "lit":
            return None
        head, eq, rest = part[1].partition("=")
        name.append(head)
        if eq:
            text = "".join(name)
            return (text, [("lit", rest)] + word.parts[k + 1:]) if NAME.fullmatch(text) else None
    return None


def _assigned(name: str, parts: list[tuple], word: _Word, values: dict[str, str],
              start: Mapping[str, str]) -> str:
    """The value ``name=...`` gives (no word splitting); else the environment's (``--env``), else Unknown."""
    try:
        return "".join(text for text, _ in _segments(parts, values))
    except _Stop as stop:
        if name in start and not isinstance(start[name], Unknown):
            return start[name]
        why = (f"{name} is set by running the script on line {word.line} ({quoted(word.source)}): give its "
               f"value with {ENV_OPTION} {name}=VALUE" if len(stop.args) > 1 else stop.args[0])
        return unknown(word.source, why)


# --- commands -------------------------------------------------------------------------------------

def _simple_commands(text: str, where: str) -> list[list[_Word]]:
    """The script's simple commands, their redirections and the operators between them dropped."""
    commands: list[list[_Word]] = []
    current: list[_Word] = []
    tokens = _Reader(text, where).tokens()
    i = 0
    while i < len(tokens):
        kind, token = tokens[i]
        if kind == "nl" or kind == "op" and token in SEPARATORS:
            if current:
                commands.append(current)
            current = []
        elif kind == "op":          # a redirection and its target: not the command's words
            if i + 1 >= len(tokens) or tokens[i + 1][0] != "word":
                raise UserError(f"{where}: syntax error near '{token}' (a redirection without a target)")
            i += 1
        else:
            current.append(token)
        i += 1
    if current:
        commands.append(current)
    return commands


def check_syntax(text: str, where: str) -> None:
    """One UserError where bash could not read ``text`` at all (an unclosed quote, ...)."""
    _simple_commands(text, where)


def _run(text: str, where: str, environ: Mapping[str, str] | None) -> Iterable[Command]:
    """Each command but assignments, ``export`` and ``unset``, with the variables set by then."""
    start = dict(environ or {})
    values, exported = dict(start), set(start)
    for command in _simple_commands(text, where):
        k, prefix = 0, []
        while k < len(command) and (a := _assignment(command[k])) is not None:
            prefix.append((a, command[k]))
            k += 1
        if k == len(command):                                  # VAR=value ...: shell variables
            for (name, parts), word in prefix:
                values[name] = _assigned(name, parts, word, values, start)
            continue
        builtin = _literal(command[0]) if k == 0 else None
        if builtin in _DECLARE:
            _declare(str(builtin), command[1:], values, exported, start)
            continue
        words: list[str] = []
        unknowns: dict[int, str] = {}
        for word in command[k:]:
            try:
                words.extend(_fields(word, values))
            except _Stop as stop:
                unknowns[len(words)] = f"line {word.line}: {stop.args[0]}"
                shown = word.source[1:-1] if re.fullmatch(r'"[^"]*"', word.source) else word.source
                words.append(unknown(shown, stop.args[0]))
        if not words:
            continue
        if words[0] == "unset":
            for name in words[1:]:
                values.pop(name, None)
                exported.discard(name)
            continue
        scope = dict(values)
        assigns = []
        for (name, parts), word in prefix:                     # VAR=value cmd: its own environment
            scope[name] = _assigned(name, parts, word, scope, start)
            assigns.append((name, scope[name]))
        yield Command(words, tuple(assigns), {name: values[name] for name in exported if name in values},
                      {name: value for name, value in values.items() if name not in exported and name not in start},
                      unknowns, where, command[0].line)


def _literal(word: _Word) -> str | None:
    """The word's text where it holds no expansion."""
    return "".join(p[1] for p in word.parts) if all(p[0] in ("lit", "q") for p in word.parts) else None


def _declare(builtin: str, args: list[_Word], values: dict[str, str], exported: set[str],
             start: Mapping[str, str]) -> None:
    """``export``, ``declare``, ``readonly``, ``local``: their assignments, and what they export."""
    flags = ""
    for word in args:
        a = _assignment(word)
        if a is not None:
            names = [a[0]]
            values[a[0]] = _assigned(a[0], a[1], word, values, start)
        else:
            try:
                fields = _fields(word, values)
            except _Stop:
                continue
            flags += "".join(f[1:] for f in fields if f.startswith("-"))
            names = []
            for f in fields:
                m = ASSIGN.match(f)
                if m:
                    values[m.group(1)] = m.group(2)
                if not f.startswith("-"):
                    names.append(m.group(1) if m else f)
        for name in names:
            if builtin == "export" and "n" in flags:
                exported.discard(name)
            elif builtin == "export" or "x" in flags:
                exported.add(name)


def script_command(text: str, where: str, starts: Callable[[list[str]], int | None], what: str,
                   environ: Mapping[str, str] | None = None) -> Command | None:
    """The one command of ``text`` that ``starts`` finds (its first word's index), with its
    environment; None when none starts, a UserError when two do."""
    found = None
    for ran in _run(text, where, environ):
        try:
            start = starts(ran.words)
        except UserError as exc:
            raise UserError(f"{where} line {ran.line}: {exc}") from None
        if start is None:
            continue
        if found is not None:
            raise UserError(f"{where}: the script runs {what} twice; give one engine per line or file")
        first = ran.words[0]
        if start > 0 and ASSIGN.match(first):
            raise UserError(f"{where} line {ran.line}: bash runs {quoted(first)} as a command, not as an "
                            f"assignment (its name is quoted): command not found, so {what} never starts")
        assigns = ran.assigns + tuple((m.group(1), m.group(2)) for m in map(ASSIGN.match, ran.words[:start]) if m)
        found = replace(ran, words=ran.words[start:], assigns=assigns,
                        unknown={i - start: why for i, why in ran.unknown.items() if i >= start})
    return found


def runs_server(text: str, where: str, starts: Callable[[list[str]], int | None],
                environ: Mapping[str, str] | None = None) -> bool:
    """Whether a command of ``text`` starts the server (one that names it wrongly counts)."""
    for ran in _run(text, where, environ):
        try:
            if starts(ran.words) is not None:
                return True
        except UserError:
            return True
    return False


@dataclass(frozen=True)
class Command:
    """One command of a script: its words, prefixes, variables and words only running it gives."""

    words: list[str]
    assigns: tuple[tuple[str, str], ...]
    exported: dict[str, str]
    unexported: dict[str, str]
    unknown: Mapping[int, str] = field(default_factory=dict)     # word index: why only running it tells
    where: str = ""
    line: int = 0

    @property
    def environment(self) -> dict[str, str]:
        """What the command's process sees: the exports, then its own prefixes."""
        return {**self.exported, **dict(self.assigns)}

    def known(self, parse: Callable[[], Any], names: Iterable[str]) -> Any:
        """``parse()`` of this command; a UserError where a word or variable it reads is Unknown."""
        for name in names:
            value = self.environment.get(name)
            if isinstance(value, Unknown):
                raise UserError(f"{self.where}: {value.why}")
        try:
            line = parse()
        except UserError as exc:
            for i, why in self.unknown.items():
                if self.words[i] in str(exc) or repr(self.words[i])[1:-1] in str(exc):
                    raise UserError(f"{self.where} {why}") from None
            raise
        read = [(o.start, o.end) for found in line.occurrences.values() for o in found]
        for i, why in self.unknown.items():
            flag_value = self.words[i].startswith("-") or i > 0 and self.words[i - 1].startswith("-")
            if any(s <= i < e for s, e in read) or not flag_value:
                raise UserError(f"{self.where} {why}")
        return line


MANY, OPTIONAL = "many", "optional"      # what an option takes besides one value ("value")
SETS = ("true", "false", "none")          # what an option that takes no value stores: True, False, True
CONFIG_NOTE = "{} {}: the flags in that file are not read by mambaxfer; write them on the command line"   # --config F
UNKNOWN = "?"       # the occurrences of a flag the server's parser does not take: UNKNOWN + its name


class Option(NamedTuple):
    """One option string of a server's parser, as its release's flags table has it."""

    dest: str
    takes: str                     # value | many | optional | true | false | none
    choices: tuple[str, ...] = ()
    default: Any = None


@dataclass(frozen=True)
class Occurrence:
    """Where a flag sits in the command's words: words[start:end]."""

    spelling: str
    start: int
    end: int


def abbreviated(table: Mapping[str, Any], name: str, shown: int | None = None, exits: str = "") -> str | None:
    """The option string ``name`` is to argparse: itself, or the one long option it is a prefix
    of; None where it is neither. An ambiguous prefix is argparse's error, said as it says it."""
    if name in table:
        return name
    if not name.startswith("--") or len(name) <= 2:
        return None
    matches = sorted(s for s in table if s.startswith(name))
    if len(matches) > 1:
        raise UserError(f"ambiguous option: {name} could match {', '.join(matches[:shown])}{exits}")
    return matches[0] if matches else None


def looked_up(resolve: Callable[[str], T | None], name: str, where: str, exits: str = "") -> T | None:
    """The parser's option ``name`` (None: it has none); an ambiguous name is its exit, said once."""
    try:
        return resolve(name)
    except UserError as exc:
        raise UserError(f"{where}: {exc}{exits}") from None


@dataclass
class Parsed:
    """What a server's parser makes of its words; ``said``: its words for a value given to a flag
    that takes none ({flag}, {word}, {value}) and for a missing one ({flag}, {count})."""

    where: str
    said: tuple[str, str]
    notes: list[str]
    values: dict[str, Any] = field(default_factory=dict)
    occurrences: dict[str, list[Occurrence]] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)

    def at(self, key: str, spelling: str, start: int, end: int) -> None:
        self.occurrences.setdefault(key, []).append(Occurrence(spelling, start, end))

    def unrecognized(self, name: str, inline: str | None, words: list[str], i: int) -> int:
        """An option the parser does not take, noted with the word it seems to take: the index after them."""
        end = i + 1 + (inline is None and i + 1 < len(words) and not words[i + 1].startswith("-"))
        self.unknown.append(name)
        self.at(UNKNOWN + name, name, i, end)
        return end

    def option(self, words: list[str], i: int, name: str, inline: str | None, spelling: str, dest: str,
               takes: str, key: str | None) -> tuple[Any, int]:
        """The option at ``words[i]`` (written ``name``) read as argparse reads it and kept as the
        field ``key`` (None: read past): its value and the index after it."""
        end = i + 1
        if takes in SETS:
            if inline is not None:
                raise UserError(f"{self.where}: " + self.said[0].format(flag=name, word=quoted(words[i]),
                                                                        value=quoted(inline)))
            value: Any = takes != "false"
        else:
            got = option_value(words, end, inline, takes)
            if got is None:
                count = "at least one argument" if takes == MANY else "one argument"
                raise UserError(f"{self.where}: " + self.said[1].format(flag=name, count=count))
            value, end = got
        if key is None:
            self.ignored.append(spelling)
            if dest == "config":
                self.notes.append(CONFIG_NOTE.format(spelling, quoted(str(value))))
        else:
            self.values[key] = value
            self.at(key, name, i, end)
        return value, end

    def lists(self) -> dict[str, Any]:
        """The line's occurrences, flags read past and unknown flags, and notes, as a line keeps them."""
        return {"occurrences": {k: tuple(v) for k, v in self.occurrences.items()},
                "ignored": tuple(dict.fromkeys(self.ignored)), "unknown": tuple(dict.fromkeys(self.unknown)),
                "notes": tuple(self.notes)}


L = TypeVar("L", bound="ServerLine")


def read_server(text: str, where: str, environ: Mapping[str, str] | None, server: str,
                starts: Callable[[list[str]], int | None], usage: str, names: tuple[str, ...],
                parse: Callable[[Command, tuple[str, ...]], L]) -> L:
    """``server``'s line (``starts`` finds it) from a command line or a shell script, ``parse``d
    with the notes on the variables of ``names`` it does not see; any error said in one line."""
    try:
        found = script_command(text, where, starts, f"{server}'s server", environ)
        if found is None:
            raise UserError(f"{where}: no {usage} found")
        notes = tuple(f"{name}={value} is set but not exported, so {server} does not see it"
                      for name, value in found.unexported.items() if name in names and name not in found.environment)
        return found.known(lambda: parse(found, notes), names)
    except UserError as exc:     # one line, whatever the input held
        raise UserError(" ".join(str(exc).split())) from None


def server_start(words: list[str], program: str, module: str) -> int | None:
    """Index of the words that start a server: ``<program> serve`` or ``python -m <module>``."""
    for i, word in enumerate(words):
        if word.rsplit("/", 1)[-1] == program and i + 1 < len(words) and words[i + 1] == "serve":
            return i
        if word == "-m" and i + 1 < len(words) and words[i + 1] == module and i > 0:
            j = i - 1
            while j > 0 and words[j].startswith("-"):
                j -= 1
            interpreter = words[j]
            if isinstance(interpreter, Unknown):
                raise UserError(interpreter.why)
            if not PYTHON.fullmatch(words[j].rsplit("/", 1)[-1]):
                raise UserError(f"{quoted(words[j])} is not python, so '-m {module}' does not start the server")
            return i - 1
    return None


def negative_number(word: str) -> bool:
    """Whether argparse reads ``word`` as a negative number (a value, not a flag)."""
    return re.fullmatch(r"-\d+(\.\d+)?", word) is not None


def option_value(words: list[str], end: int, inline: str | None, takes: str) -> tuple[Any, int] | None:
    """An option's value and the index after it, as argparse reads it; None where one is missing."""
    if takes == OPTIONAL:
        if inline is None and end < len(words) and not words[end].startswith("-"):
            return words[end], end + 1
        return inline, end
    if inline is not None:
        value = inline
    elif end < len(words) and not (words[end].startswith("-") and not negative_number(words[end])):
        value, end = words[end], end + 1
    else:
        return None
    if takes == MANY:
        while end < len(words) and not words[end].startswith("-"):
            end += 1
    return value, end


class ServerLine:
    """What a server's line does with its ``words`` and ``environment()``; ``exported``: the
    variables the server reads as the script exported them (None: unset)."""

    words: tuple[str, ...]
    notes: tuple[str, ...]
    env_prefix: tuple[tuple[str, str], ...]
    exported: Callable[[], Iterable[tuple[str, str | None]]]

    def environment(self) -> tuple[tuple[str, str], ...]:
        """The prefixes a pasted line needs: the exported variables it does not set, then its own."""
        own = dict(self.env_prefix)
        return tuple((k, v) for k, v in self.exported() if v is not None and k not in own) + self.env_prefix

    def command(self) -> str:
        """The command as one line a shell reads back the same (env prefixes first)."""
        return shlex.join([f"{k}={v}" for k, v in self.environment()] + list(self.words))

    def kept_notes(self) -> tuple[str, ...]:
        """The notes a corrected line keeps: those on the script's unexported variables."""
        return tuple(n for n in self.notes if "not exported" in n)
