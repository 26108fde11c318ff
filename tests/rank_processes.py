"""Find the processes of one execute run by a tag in their environment (ranks inherit it)."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

TAG = "MAMBAXFER_TEST_RUN"


def new_tag() -> dict[str, str]:
    return {TAG: uuid.uuid4().hex}


def tagged(env: dict[str, str]) -> list[int]:
    """PIDs of live processes whose environment carries this tag."""
    needle = f"{TAG}={env[TAG]}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in environ.split(b"\0") and state != "Z":
            found.append(int(entry.name))
    return found


def assert_no_rank_left(env: dict[str, str], within: float = 3.0) -> None:
    end = time.time() + within
    while (left := tagged(env)) and time.time() < end:
        time.sleep(0.1)
    assert not left, f"processes of the run still alive: {left}"
