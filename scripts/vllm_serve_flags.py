"""Write the option table of ``vllm serve`` as one installed vLLM release parses it.

    VLLM_SSM_CONV_STATE_LAYOUT=DS <venv with vllm>/bin/python scripts/vllm_serve_flags.py \
        mambaxfer_cli/engines/vllm/releases/v0_34/serve_flags.json

It builds vLLM's own parser (``entrypoints/common/cli_args.make_arg_parser`` over a
``FlexibleArgumentParser``, as ``vllm serve`` does) and records every option string it accepts,
hidden ones included (``--no-enable-prefix-caching``): ``[dest, takes]`` (and its choices, when it
has any) where ``takes`` is
``value``, ``many`` (nargs * or +), ``optional`` (nargs ?), or, for a flag that takes no value, the
boolean it stores (``true``/``false``) or ``none`` (another constant). ``serve_args`` reads these
tables to know which flags a release has. No GPU is needed: the device check is skipped.
"""

from __future__ import annotations

import json
import sys


def main(out: str) -> None:
    import vllm
    import vllm.config.device as device

    device.DeviceConfig.__post_init__ = lambda self: None      # no GPU here: the default device is not inferred
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    options = {}
    for spelling, action in sorted(parser._option_string_actions.items()):
        if spelling in ("-h", "--help"):
            continue
        if action.nargs == 0:
            negative = getattr(action, "negative_option_strings", None)
            if negative is not None:                                  # vLLM's EnableDisableAction
                takes = "false" if spelling in negative else "true"
            elif type(action).__name__ == "BooleanOptionalAction":
                takes = "false" if spelling.startswith("--no-") else "true"
            elif action.const in (True, False):
                takes = "true" if action.const else "false"
            else:
                takes = "none"
        elif action.nargs in ("*", "+"):
            takes = "many"
        elif action.nargs == "?":
            takes = "optional"
        else:
            takes = "value"
        options[spelling] = [action.dest, takes] + ([[str(c) for c in action.choices]] if action.choices else [])
    with open(out, "w") as handle:
        json.dump({"vllm": vllm.__version__, "options": options}, handle, indent=0, sort_keys=True)
        handle.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
