"""Shared test set-up: in CI (CI=true) NIXL must work, so its transfer tests never skip there."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

NIXL_PROBE = "from mambaxfer_cli.execute.nixl_api import load_nixl; load_nixl('cpu')"


def nixl_importable() -> bool:
    # A fresh interpreter: importing NIXL here would put it in every test's process.
    probe = subprocess.run([sys.executable, "-c", NIXL_PROBE], capture_output=True, text=True, timeout=120)
    return probe.returncode == 0


def pytest_sessionstart(session: pytest.Session) -> None:
    if os.environ.get("CI") == "true" and not nixl_importable():
        pytest.exit("CI=true but NIXL cannot be imported: the execute tests would only skip. Install the "
                    "execute extra (see the README's test command).", returncode=1)


_nixl_checked: list[bool] = []


@pytest.fixture(scope="session")
def nixl() -> None:
    """Skip a test that needs NIXL where it is missing (never in CI: the session stops first)."""
    if not _nixl_checked:
        _nixl_checked.append(nixl_importable())
    if not _nixl_checked[0]:
        pytest.skip("NIXL is not installed (pip install torch, then -e '.[execute]')")
