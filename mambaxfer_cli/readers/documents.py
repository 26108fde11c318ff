"""Reading the JSON and YAML files users hand us: bounded in size and nesting, decoded as UTF-8,
every failure one UserError that names the file."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.limits import MAX_FILE_BYTES, MAX_NESTING, check_document


def read_text(path: Path, where: str) -> str:
    """The file's text: at most MAX_FILE_BYTES, UTF-8 (a BOM is allowed)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise UserError(f"{where}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise UserError(f"{where}: larger than {MAX_FILE_BYTES >> 20} MiB; not a model config or plan document")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserError(f"{where}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    if "integer string conversion" in text:   # Python's guard against quadratic int parsing
        return f"an integer of more than {sys.get_int_max_str_digits()} digits, larger than any dimension"
    return text.splitlines()[0] if text else type(exc).__name__


def parse_json(text: str, where: str) -> Any:
    try:
        data = json.loads(text)  # accepts Infinity/NaN, which real configs contain
    except json.JSONDecodeError as exc:
        raise UserError(f"{where}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise UserError(f"{where}: JSON nested too deeply; not a model config or plan document") from None
    except ValueError as exc:   # e.g. an integer of more digits than Python converts
        raise UserError(f"{where}: invalid JSON: {_first_line(exc)}") from None
    check_document(data, where)
    return data


def flow_depth(text: str) -> int:
    """How deep '[' and '{' nest (quotes ignored: an over-estimate is harmless). PyYAML's parser
    slows down quadratically with depth, so this is measured before it runs."""
    import numpy as np

    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    steps = np.isin(codes, (ord("["), ord("{"))).astype(np.int32) - np.isin(codes, (ord("]"), ord("}")))
    return int(np.cumsum(steps).max(initial=0))


def parse_yaml(text: str, where: str) -> Any:
    import yaml

    if flow_depth(text) > MAX_NESTING:
        raise UserError(f"{where}: YAML nested more than {MAX_NESTING} levels deep; not a model file or plan document")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UserError(f"{where}: not valid YAML: {_first_line(exc)}") from None
    except RecursionError:
        raise UserError(f"{where}: YAML nested too deeply; not a model file or plan document") from None
    except (ValueError, TypeError, OverflowError) as exc:   # a value the constructors cannot build
        raise UserError(f"{where}: not valid YAML: {_first_line(exc)}") from None
    check_document(data, where)
    return data
