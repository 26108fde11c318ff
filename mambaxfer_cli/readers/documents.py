"""The JSON and YAML files users hand us, bounded; every failure one UserError naming the file."""

from __future__ import annotations

import json
import os
import select
import stat
import sys
from pathlib import Path
from typing import Any

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.limits import INPUT_IDLE_S, MAX_FILE_BYTES, MAX_NESTING, check_document


def read_bounded(path: Path | str, where: str, limit: int, what: str) -> bytes:
    """At most ``limit`` bytes of the file (``-``: standard input; a silent pipe is refused after
    INPUT_IDLE_S seconds), or one UserError (``what``: what it should be)."""
    try:
        if str(path) == "-":
            fd = os.dup(0)
        else:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise UserError(f"{where}: cannot read: {exc.strerror or exc}") from None
    blocking = os.get_blocking(fd)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise UserError(f"{where}: is a directory; give {what}")
        if os.isatty(fd):
            raise UserError(f"{where}: is a terminal; give {what}")
        os.set_blocking(fd, False)
        size = f"{limit >> 20} MiB" if limit >= 1 << 20 and limit % (1 << 20) == 0 else f"{limit} bytes"
        too_big = f"{where}: larger than {size}; not {what}"
        if stat.S_ISREG(info.st_mode) and info.st_size > limit:
            raise UserError(too_big)
        chunks, total = [], 0
        while total <= limit:
            try:
                chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            except BlockingIOError:        # a pipe or FIFO whose writer has not written yet
                ready, _, _ = select.select([fd], [], [], INPUT_IDLE_S)
                if not ready:
                    raise UserError(f"{where}: no data for {INPUT_IDLE_S:g} seconds from this pipe or "
                                    f"FIFO; give {what}") from None
                continue
            except OSError as exc:
                raise UserError(f"{where}: cannot read: {exc.strerror or exc}") from None
            if not chunk:
                if total == 0 and stat.S_ISFIFO(info.st_mode):
                    said = ("standard input is empty" if str(path) == "-"
                            else "a FIFO with no writer (or one that wrote nothing)")
                    raise UserError(f"{where}: {said}; give {what}")
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise UserError(too_big)
        return b"".join(chunks)
    finally:
        os.set_blocking(fd, blocking)     # standard input's file is shared with the shell that started us
        os.close(fd)


def read_text(path: Path, where: str, limit: int = MAX_FILE_BYTES,
              what: str = "a model config or plan document") -> str:
    """The file's text: at most ``limit`` bytes (MAX_FILE_BYTES), UTF-8 (a BOM is allowed); a bad
    byte is one UserError naming it."""
    data = read_bounded(path, where, limit, what)
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
    """How deep '[' and '{' nest (quotes ignored), measured before PyYAML's quadratic parser runs."""
    import numpy as np

    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    steps = np.isin(codes, (ord("["), ord("{"))).astype(np.int32) - np.isin(codes, (ord("]"), ord("}")))
    return int(np.cumsum(steps).max(initial=0))


def parse_yaml(text: str, where: str) -> Any:
    import yaml

    # Nesting cannot go deeper than the text has openers: counting them spares most files the measure.
    if text.count("[") + text.count("{") > MAX_NESTING and flow_depth(text) > MAX_NESTING:
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
