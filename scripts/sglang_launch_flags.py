"""Write the option table of SGLang's server launcher as one installed SGLang release parses it.

    <venv with sglang>/bin/python scripts/sglang_launch_flags.py \
        mambaxfer_cli/engines/sglang/releases/v0_5_23/launch_flags.json

It builds SGLang's own parser (``ServerArgs.add_cli_args`` over a plain ``argparse.ArgumentParser``,
as ``prepare_server_args`` does for ``python -m sglang.launch_server`` and ``sglang serve``) and
records every option string it accepts: ``dest``, ``takes`` (``value``, ``many`` for nargs * or +,
``optional`` for nargs ?, or, for a flag that takes no value, the constant it stores: ``true``,
``false`` or ``none``), its ``choices`` and its ``default`` where it has them (a default that is
not JSON is left out), and whether the parser allows abbreviations. ``launch_args`` reads this
table. No GPU is needed: building the parser touches no device.
"""

from __future__ import annotations

import argparse
import json
import sys


def _takes(action: argparse.Action) -> str:
    if action.nargs == 0:
        if action.const is True or isinstance(action, argparse._StoreTrueAction):
            return "true"
        if action.const is False or isinstance(action, argparse._StoreFalseAction):
            return "false"
        return "none"
    if action.nargs in ("*", "+"):
        return "many"
    if action.nargs == "?":
        return "optional"
    return "value"


def main(out: str) -> None:
    import sglang
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    options = {}
    for spelling, action in sorted(parser._option_string_actions.items()):
        if spelling in ("-h", "--help"):
            continue
        entry: dict = {"dest": action.dest, "takes": _takes(action)}
        if action.choices:
            unordered = isinstance(action.choices, (set, frozenset))
            entry["choices"] = [str(c) for c in (sorted(action.choices) if unordered else action.choices)]
        if action.default is not None and action.default is not argparse.SUPPRESS:
            try:
                json.dumps(action.default)
                entry["default"] = action.default
            except TypeError:
                pass
        options[spelling] = entry
    with open(out, "w") as handle:
        json.dump({"sglang": sglang.__version__, "allow_abbrev": parser.allow_abbrev, "options": options}, handle,
                  indent=0, sort_keys=True)
        handle.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
