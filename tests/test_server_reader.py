"""The server-line reader core (``readers/shell.py``) knows no engine: any parser's flag table drives
it (here a toy one), with argparse's abbreviations, value rules and the parser's own words."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.readers.shell import UNKNOWN, Option, Parsed, abbreviated, read_server, server_start

TABLE = {"--size": Option("size", "value"), "--sizes": Option("sizes", "many"), "--fast": Option("fast", "true"),
         "--slow": Option("fast", "false"), "--config": Option("config", "value"), "--port": Option("port", "value")}
SAID = ("{flag} takes no value ({word}, {value})", "{flag} wants {count}")
FIELDS = {"size": "size", "sizes": "sizes", "fast": "fast"}


def read(words: list[str]) -> Parsed:
    parsed = Parsed("--x", SAID, [])
    i = 0
    while i < len(words):
        name, eq, value = words[i].partition("=")
        spelling = abbreviated(TABLE, name)
        if spelling is None:
            i = parsed.unrecognized(name, value if eq else None, words, i)
            continue
        option = TABLE[spelling]
        i = parsed.option(words, i, name, value if eq else None, spelling, option.dest, option.takes,
                          FIELDS.get(option.dest))[1]
    return parsed


def test_a_flag_table_drives_the_reader():
    parsed = read(["--size=2", "--sizes", "1", "2", "--fa", "--slow", "--port", "-1", "--config", "c.yaml",
                   "--odd", "v", "--bare", "--other"])
    assert parsed.values == {"size": "2", "sizes": "1", "fast": False}
    assert [(o.spelling, o.start, o.end) for o in parsed.occurrences["fast"]] == [("--fa", 4, 5), ("--slow", 5, 6)]
    assert [(o.start, o.end) for o in parsed.occurrences["sizes"]] == [(1, 4)]
    assert parsed.ignored == ["--port", "--config"] and parsed.unknown == ["--odd", "--bare", "--other"]
    assert [(o.start, o.end) for o in parsed.occurrences[UNKNOWN + "--odd"]] == [(10, 12)]
    assert parsed.notes[0].startswith("--config 'c.yaml': the flags in that file are not read")
    lists = parsed.lists()
    assert lists["unknown"] == ("--odd", "--bare", "--other") and set(lists["occurrences"]) >= {"size", "fast"}


@pytest.mark.parametrize("words, said", [
    (["--fast=1"], "--x: --fast takes no value ('--fast=1', '1')"),
    (["--size"], "--x: --size wants one argument"),
    (["--sizes", "--fast"], "--x: --sizes wants at least one argument"),
])
def test_the_parsers_words_for_a_wrong_value(words, said):
    with pytest.raises(UserError) as exc:
        read(words)
    assert str(exc.value) == said


def test_an_ambiguous_prefix_is_said_as_argparse_says_it():
    with pytest.raises(UserError, match=r"^ambiguous option: --s could match --size, --sizes, --slow \(mine\)$"):
        abbreviated(TABLE, "--s", exits=" (mine)")
    with pytest.raises(UserError, match=r"could match --size, --sizes$"):
        abbreviated(TABLE, "--s", 2)
    assert abbreviated(TABLE, "--sl") == "--slow" and abbreviated(TABLE, "-s") is None


def test_a_script_line_is_found_read_and_said_in_one_line():
    def parse(found, notes):
        return SimpleNamespace(occurrences={}, said=(found.words, found.environment, notes))

    def read_toy(text: str):
        return read_server(text, "--x", None, "Toy", lambda words: server_start(words, "toy", "toy.server"),
                           "'toy serve M'", ("TOY_MODE",), parse).said

    words, env, notes = read_toy("TOY_MODE=a\nexport B=1\nTOY_MODE=b toy serve m --size 2 > log")
    assert words == ["toy", "serve", "m", "--size", "2"] and env == {"B": "1", "TOY_MODE": "b"} and notes == ()
    assert read_toy("TOY_MODE=a\ntoy serve m")[2] == ("TOY_MODE=a is set but not exported, so Toy does not see it",)
    with pytest.raises(UserError, match=r"^--x: no 'toy serve M' found$"):
        read_toy("echo toy")
    with pytest.raises(UserError, match="^--x: the script runs Toy's server twice"):
        read_toy("toy serve m\ntoy serve m")
