"""Bounds that any real model and engine stay within (at least 16 times the largest known), checked
where values enter the tool: they only ever stop a typo or a corrupt file.
"""

from __future__ import annotations

import math

from mambaxfer_cli.errors import UserError

MAX_LAYERS = 4096            # cache-keeping layers; the deepest models have about 128
MAX_DIM = 1 << 20            # any one dimension (hidden size, heads, head size, state size, groups)
MAX_CONV_KERNEL = 64         # real kernels: 4
MAX_NUM_SPEC = 128           # speculative tokens
MAX_LAYER_STATE = 1 << 28    # bytes of one layer's state at TP 1 (256 MiB; real: at most ~8 MiB)
MAX_TP = 256                 # one engine's tensor-parallel size
MAX_KERNEL_BLOCKS = 1 << 32  # an engine's kernel blocks (a GPU holds at most ~10^8)
MAX_KV_GROUPS = MAX_LAYERS
MAX_TIMEOUT = 7 * 24 * 3600.0
MAX_SIMULATION_BYTES = 4 << 30   # what check may hold to simulate one pairing

MAX_FILE_BYTES = 16 << 20    # a config.json, model file or plan document (real configs: < 100 KB)
MAX_NESTING = 64             # JSON/YAML nesting (real configs: 3)
MAX_NODES = 1_000_000        # values in one document, aliases counted each time (a plan: ~6,000)
MAX_SCRIPT_BYTES = 1 << 20   # a --prefill-file / --decode-file launch script (real ones: < 4 KB)
MAX_REF_BYTES = 4096         # a Hugging Face cache ref (a 40-character commit hash)
INPUT_IDLE_S = 30.0          # seconds a pipe or FIFO may send nothing before it is refused
MAX_JSON_INT_DIGITS = 40     # digits of an integer in a serve flag's JSON (any engine setting: < 20)


# Each integer option: (lowest, highest, what the highest is beyond).
BOUNDS: dict[str, tuple[int, int, str]] = {
    **dict.fromkeys(("--p-tp", "--d-tp"), (1, MAX_TP, "deployment's TP size")),
    "--num-spec": (0, MAX_NUM_SPEC, "speculative decoding uses"),
    **dict.fromkeys(("--p-num-blocks", "--d-num-blocks"), (1, MAX_KERNEL_BLOCKS, "GPU's kernel blocks")),
    **dict.fromkeys(("--p-blocks-per-logical", "--d-blocks-per-logical", "--blocks-per-logical"),
                    (1, 1024, "engine's")),
    "--attention-streams": (1, 2, "engine's streams (1 or 2)"),
    **dict.fromkeys(("--kv-tensors", "--ssm-tensors", "--layers"), (1, MAX_LAYERS, "model's layers")),
    "--request-blocks": (1, 1 << 16, "request's"),
    "--seed": (0, (1 << 32) - 1, "32-bit seed"),
    "--blocks": (1, MAX_KERNEL_BLOCKS, "engine's blocks"),
    "--iters": (1, 100_000, "useful number of repeats"),
    **dict.fromkeys(("--kv-heads", "--head-size"), (1, MAX_DIM, "model's")),
}


def check_bounds(**values: int | None) -> None:
    """Every given integer option within its BOUNDS (keyword: the flag with '_' for '-')."""
    for key, value in values.items():
        if value is not None:
            flag = "--" + key.replace("_", "-")
            within(flag, value, *BOUNDS[flag])


def at_most(name: str, value: int, limit: int, what: str = "") -> int:
    """``value`` itself, when it is within ``1..limit``; else a one-line error naming both."""
    return within(name, value, 1, limit, what)


def within(name: str, value: int, low: int, high: int, what: str = "") -> int:
    if value < low:
        raise UserError(f"{name} must be >= {low}, got {_short(value)}")
    if value > high:
        beyond = f" is larger than any {what}" if what else " is too large"
        raise UserError(f"{name} {_short(value)}{beyond}; at most {high}")
    return value


def finite_seconds(name: str, value: float, high: float = MAX_TIMEOUT) -> float:
    if not math.isfinite(value) or value <= 0:
        raise UserError(f"{name} must be a positive number of seconds, got {value}")
    if value > high:
        raise UserError(f"{name} {value:g} is longer than a run may wait; at most {high:g} seconds")
    return value


def _short(value: int) -> str:
    return str(value) if abs(value) < 10 ** 40 else f"~10^{len(str(abs(value))) - 1}"


def check_document(data: object, where: str) -> None:
    """Refuse a document nested deeper than MAX_NESTING or holding more than MAX_NODES values."""
    stack = [(data, 1)]
    nodes = 0
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise UserError(f"{where}: holds more than {MAX_NODES} values (YAML aliases count each time "
                            f"they are used); not a model config or plan document")
        if isinstance(value, dict):
            children = [*value.keys(), *value.values()]
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth >= MAX_NESTING and children:
            raise UserError(f"{where}: nested more than {MAX_NESTING} levels deep; not a model config or "
                            f"plan document")
        stack.extend((child, depth + 1) for child in children)
