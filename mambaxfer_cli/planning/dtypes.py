"""Element sizes of the dtypes a state can use (no torch: the planning core stays light)."""

from typing import Iterable

from mambaxfer_cli.errors import UserError, quoted

DTYPE_BYTES = {
    "float64": 8,
    "float32": 4,
    "bfloat16": 2,
    "float16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}

_ALIASES = {
    "fp64": "float64", "double": "float64",
    "fp32": "float32", "float": "float32", "f32": "float32",
    "bf16": "bfloat16",
    "fp16": "float16", "half": "float16", "f16": "float16",
    "fp8": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2",
}


# The values vLLM's --dtype, --mamba-cache-dtype and --mamba-ssm-cache-dtype take (ModelDType,
# MambaDType), which mambaxfer's --dtype, --conv-dtype and --ssm-dtype take too.
MODEL_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
STATE_DTYPES = ("auto", "float32", "float16", "bfloat16")
DTYPE_FLAGS = {"--dtype": ("--dtype", MODEL_DTYPES), "--conv-dtype": ("--mamba-cache-dtype", STATE_DTYPES),
               "--ssm-dtype": ("--mamba-ssm-cache-dtype", STATE_DTYPES)}


def invalid_choice(flag: str, value: str, choices: Iterable[str]) -> UserError:
    """argparse's refusal of a value outside an option's choices, as a serve line's parser says it."""
    return UserError(f"{flag}: invalid choice {quoted(value)} (choose from {', '.join(sorted(choices))})")


def flag_dtype(flag: str, value: str | None) -> str | None:
    """A dtype option's value as vLLM's parser takes it (None: not given, or auto)."""
    if value is None:
        return None
    vllm_flag, choices = DTYPE_FLAGS[flag]
    if value not in choices:
        shown = flag if flag == vllm_flag else f"{flag} (vLLM's {vllm_flag})"
        raise invalid_choice(shown, value, choices)
    return None if value == "auto" else value


def canonical_dtype(name: str) -> str:
    """Normalise a dtype name ('bf16', 'torch.bfloat16', 'BFloat16') to its canonical form."""
    key = str(name).strip().lower().removeprefix("torch.")
    key = _ALIASES.get(key, key)
    if key not in DTYPE_BYTES:
        known = ", ".join(DTYPE_BYTES)
        shown = str(name) if len(str(name)) <= 40 else f"{str(name)[:37]}..."
        raise UserError(f"unknown dtype '{shown}'; known dtypes: {known} (or bf16, fp16, fp32)")
    return key


def dtype_bytes(name: str) -> int:
    return DTYPE_BYTES[canonical_dtype(name)]
