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


# --- etcd: NIXL's central metadata store, for the two-host tests ---------------------------------

ETCD_ENV = "MAMBAXFER_TEST_ETCD"   # client URL of a running etcd (.ci/run starts one and sets it)


def _etcd_healthy(url: str, wait: float) -> bool:
    import time
    import urllib.request

    end = time.time() + wait
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=1) as reply:
                if reply.status == 200:
                    return True
        except OSError:
            pass
        if time.time() >= end:
            return False
        time.sleep(0.1)


@pytest.fixture(scope="session")
def etcd(tmp_path_factory) -> str:
    """Client URL of a real etcd server: the one .ci/run started, else one started here on loopback
    (Debian's etcd-server). Missing in CI is a failure, never a skip."""
    import shutil

    from rank_processes import free_port

    url = os.environ.get(ETCD_ENV)
    if url:
        if not _etcd_healthy(url, 10):
            pytest.fail(f"{ETCD_ENV}={url}: no etcd answers there")
        yield url
        return
    binary = shutil.which("etcd")
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but there is no etcd server (apt-get install etcd-server; .ci/run does it)")
        pytest.skip("no etcd server here (apt-get install etcd-server)")
    host = "127.0.0.5"
    client = free_port(host=host)
    peer = free_port(host=host)
    while peer == client:
        peer = free_port(host=host)
    url = f"http://{host}:{client}"
    data = tmp_path_factory.mktemp("etcd")
    log = open(data / "etcd.log", "w")
    server = subprocess.Popen(
        [binary, "--name", "test", "--data-dir", str(data / "data"), "--listen-client-urls", url,
         "--advertise-client-urls", url, "--listen-peer-urls", f"http://{host}:{peer}",
         "--initial-advertise-peer-urls", f"http://{host}:{peer}",
         "--initial-cluster", f"test=http://{host}:{peer}"], stdout=log, stderr=subprocess.STDOUT)
    try:
        if not _etcd_healthy(url, 20):
            pytest.fail(f"etcd did not come up at {url}; see {data / 'etcd.log'}")
        yield url
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(5)
        log.close()


@pytest.fixture
def cli(capsys):
    """Runs the CLI in this process: (exit code, stdout, stderr)."""
    from mambaxfer_cli.cli import flushed, run as run_command

    def run(*args: str) -> tuple[int, str, str]:
        code = flushed(run_command(list(args)))
        out, err = capsys.readouterr()
        return code, out, err
    return run


@pytest.fixture(autouse=True)
def vllm_dtypes(monkeypatch) -> None:
    """A model read naming no engine is read in vLLM's dtypes (the default engine's, as ``models``
    reads them); a test of the core's own dtypes names ``Startup()``."""
    from mambaxfer_cli.engines.vllm.dtypes import DTYPES
    from mambaxfer_cli.readers import model_config

    monkeypatch.setattr(model_config, "NO_ENGINE", DTYPES)
