"""A shell script's commands, read as a shell reads them: quotes, line continuations, comments,
and the operators that end a command (``;``, ``&``, ``&&``, ``|``, ...) or redirect its output
(``> server.log 2>&1``, ``| tee x``), which are dropped with their targets. Pure: text in, words
out; each engine's command-line reader takes it from there, with the half both share (the end of
this file: where the server starts, argparse's values, the line's ``command()``).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from mambaxfer_cli.errors import UserError

ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)


SEPARATORS = (";;", ";", "&&", "&", "||", "|&", "|", "(", ")")
REDIRECTS = ("&>>", "&>", ">>", ">&", ">|", "<<<", "<<-", "<<", "<&", "<>", ">", "<")
_OPERATORS = sorted(SEPARATORS + REDIRECTS, key=len, reverse=True)


def split_commands(text: str, where: str) -> list[list[str]]:
    """The script's simple commands, each its words (quotes removed, continuations joined),
    without the operators between them or the redirections in them."""
    commands = []
    for line in _logical_lines(re.sub(r"\\\r?\n", " ", text)):
        current: list[str] = []
        tokens = _tokens(line, where)
        i = 0
        while i < len(tokens):
            kind, token = tokens[i]
            if kind == "op" and token in SEPARATORS:
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


def _tokens(line: str, where: str) -> list[tuple[str, str]]:
    """One logical line as a shell splits it: ("word", text) and ("op", operator). A word of
    digits right before a redirection (``2>&1``) is its file descriptor, part of the operator."""
    out: list[tuple[str, str]] = []
    word: list[str] = []
    started = False            # a word is under way (it may be empty: '')
    i, n = 0, len(line)

    def end_word() -> None:
        nonlocal word, started
        if started:
            out.append(("word", "".join(word)))
        word, started = [], False

    while i < n:
        ch = line[i]
        if ch in " \t\r\n":
            end_word()
            i += 1
        elif ch == "#" and not started:
            break
        elif ch == "'":
            close = line.find("'", i + 1)
            if close < 0:
                raise UserError(f"{where}: cannot read the command line: No closing quotation (an unclosed quote?)")
            word.append(line[i + 1:close])
            started, i = True, close + 1
        elif ch == '"':
            i += 1
            while i < n and line[i] != '"':
                if line[i] == "\\" and i + 1 < n and line[i + 1] in '$`"\\':
                    word.append(line[i + 1])
                    i += 2
                else:
                    word.append(line[i])
                    i += 1
            if i >= n:
                raise UserError(f"{where}: cannot read the command line: No closing quotation (an unclosed quote?)")
            started, i = True, i + 1
        elif ch == "\\":
            word.append(line[i + 1] if i + 1 < n else "\\")     # a backslash that ends the text stays
            started, i = True, i + 2
        elif ch in ";&|()<>":
            op = next(o for o in _OPERATORS if line.startswith(o, i))
            if ch in "<>" and started and word and "".join(word).isdigit() and not _quoted_before(line, i):
                word, started = [], False          # the descriptor of this redirection
            end_word()
            out.append(("op", op))
            i += len(op)
        else:
            word.append(ch)
            started, i = True, i + 1
    end_word()
    return out


def _quoted_before(line: str, i: int) -> bool:
    """Whether the word that ends at ``i`` holds a quote or escape (then it is an argument)."""
    j = i
    while j > 0 and line[j - 1] not in " \t":
        j -= 1
        if line[j] in "'\"\\":
            return True
    return False


def _logical_lines(text: str) -> list[str]:
    """Split at newlines outside quotes (a quoted JSON value may span lines)."""
    lines: list[str] = []
    current: list[str] = []
    quote: str | None = None
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


def script_command(text: str, where: str, starts: Callable[[list[str]], int | None], what: str,
                   environ: Mapping[str, str] | None = None):
    """The one command of ``text`` that ``starts`` finds (the index of its first word), with the
    ``VAR=value`` words before it and the variables the script exports before it (``export``,
    ``unset``; ``environ``: what it inherits); None when no command starts. Two such commands:
    one UserError (``what`` names them)."""
    env: dict[str, str] = dict(environ or {})
    shell_vars: dict[str, str] = {}
    found = None
    for words in split_commands(text, where):
        if words[0] == "export":
            for word in words[1:]:
                m = ASSIGN.match(word)
                if m:
                    env[m.group(1)] = m.group(2)
                elif word in shell_vars:
                    env[word] = shell_vars[word]
            continue
        if words[0] == "unset":
            for word in words[1:]:
                env.pop(word, None)
            continue
        start = starts(words)
        prefix = words[:start] if start is not None else words
        assigns = [(m.group(1), m.group(2)) for m in map(ASSIGN.match, prefix) if m]
        if start is None:
            if words and len(assigns) == len(words):       # VAR=value on its own: a shell variable
                shell_vars.update(assigns)
            continue
        if found is not None:
            raise UserError(f"{where}: the script runs {what} twice; give one engine per line or file")
        found = (words[start:], assigns, dict(env))
    if found is None:
        return None
    return Command(found[0], tuple(found[1]), found[2], shell_vars)


@dataclass(frozen=True)
class Command:
    """One command of a script: its words, its ``VAR=value`` prefixes, the variables exported
    before it, and the ones set but not exported."""

    words: list[str]
    assigns: tuple[tuple[str, str], ...]
    exported: dict[str, str]
    unexported: dict[str, str]

    @property
    def environment(self) -> dict[str, str]:
        """What the command's process sees: the exports, then its own prefixes."""
        return {**self.exported, **dict(self.assigns)}


MANY, OPTIONAL = "many", "optional"      # what an option takes besides one value ("value")
CONFIG_NOTE = "{} {}: the flags in that file are not read by mambaxfer; write them on the command line"   # --config F


@dataclass(frozen=True)
class Occurrence:
    """Where a flag sits in the command's words: words[start:end]."""

    spelling: str
    start: int
    end: int


UNKNOWN = "?"       # the occurrences of a flag the server's parser does not take: UNKNOWN + its name


def server_start(words: list[str], program: str, module: str) -> int | None:
    """Index of the words that start a server: ``<program> serve`` or ``python -m <module>``."""
    for i, word in enumerate(words):
        if word.rsplit("/", 1)[-1] == program and i + 1 < len(words) and words[i + 1] == "serve":
            return i
        if word == "-m" and i + 1 < len(words) and words[i + 1] == module and i > 0:
            return i - 1
    return None


def negative_number(word: str) -> bool:
    """Whether argparse reads ``word`` as a negative number (a value, not a flag)."""
    return re.fullmatch(r"-\d+(\.\d+)?", word) is not None


def option_value(words: list[str], end: int, inline: str | None, takes: str) -> tuple[Any, int] | None:
    """An option's value and the index after it, as argparse reads it (``takes``: value, many or
    optional); None where a value it needs is missing."""
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
    """What a server's line does with its ``words`` and ``environment()`` (each engine's frozen
    dataclass has them)."""

    words: tuple[str, ...]
    notes: tuple[str, ...]
    environment: Callable[[], tuple[tuple[str, str], ...]]

    def command(self) -> str:
        """The command as one line a shell reads back the same (env prefixes first)."""
        return shlex.join([f"{k}={v}" for k, v in self.environment()] + list(self.words))

    def kept_notes(self) -> tuple[str, ...]:
        """The notes a corrected line keeps: those on the script's unexported variables."""
        return tuple(n for n in self.notes if "not exported" in n)
