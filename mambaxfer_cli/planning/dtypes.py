"""Element sizes of the dtypes a state can use (no torch: the planning core stays light)."""

from mambaxfer_cli.errors import UserError

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
