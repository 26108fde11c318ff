"""What every engine's runs show on stderr: the ranks' live phases, two-host lines, progress bars."""

from __future__ import annotations

import functools
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from mambaxfer_cli.render.console import columns_table
from mambaxfer_cli.render.model_view import human_bytes

if TYPE_CHECKING:
    from mambaxfer_cli.execute.discovery import Discovery

PHASE_STYLES = {"done": "green", "failed": "bold red", "died": "bold red", "transferring": "cyan",
                "verifying": "magenta", "exchanging": "yellow", "serving": "yellow"}


class ProgressView:
    """A live table of the ranks' phases on stderr; silent when stderr is not a terminal."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.console = Console(stderr=True, highlight=False)
        self.rows: dict[str, tuple[str, str, float]] = {}
        self.started = time.time()
        self._live: Live | None = None

    def __enter__(self) -> "ProgressView":
        if self.console.is_terminal:
            self._live = Live(self._render(), console=self.console, refresh_per_second=8, transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)

    def update(self, name: str, phase: str, detail: str) -> None:
        self.rows[name] = (phase, detail, time.time() - self.started)
        if self._live is not None:
            self._live.update(self._render())

    def _render(self) -> Table:
        table = columns_table(self.title, [(column, "right" if column == "at" else "left")
                                           for column in ("rank", "phase", "detail", "at")], box=None, padding=(0, 1))
        for name in sorted(self.rows, key=lambda n: (n[0] != "P", int(n[1:]))):
            phase, detail, at = self.rows[name]
            table.add_row(name, Text(phase, style=PHASE_STYLES.get(phase, "")), detail, f"{at:.1f}s")
        return table


def checked(ok: bool, bad: str) -> Text:
    """A D rank's check: verified, or what its bytes got wrong."""
    return Text("verified", style="green") if ok else Text(bad, style="bold red")


def run_totals(total_bytes: int, longest: float, phases: Mapping[str, float], done: str, checked: str) -> str:
    """The end of execute's caption: the bytes, their rate, what was checked, the run's phases."""
    rate = total_bytes / longest / 1e9 if longest > 0 else 0.0
    return (f"time = median; all {done} {human_bytes(total_bytes)} at {rate:.2f} GB/s; every byte of every "
            f"{checked}; " + ", ".join(f"{name} {at:.2f}s" for name, at in phases.items()))


def ranks_named(role: str, count: int) -> str:
    return f"{role}0" if count == 1 else f"{role}0..{role}{count - 1}"


def two_host_line(discovery: "Discovery", p_tp: int, d_tp: int, decode_does: str) -> str:
    """The line a two-host side prints first: where P waits, or what D does and through what (etcd, or
    the prefill ranks' NIXL listeners)."""
    if discovery.mode == "etcd":
        where = f"etcd {discovery.endpoints}, run {discovery.run_id}"
    else:
        first, last = discovery.p_address(0), discovery.p_address(p_tp - 1)
        ports = str(first[1]) if p_tp == 1 else f"{first[1]}..{last[1]}"
        where = f"NIXL listener{'s' if p_tp > 1 else ''} {discovery.host}:{ports}"
    if discovery.role == "prefill":
        return f"prefill side: {ranks_named('P', p_tp)} wait for the decode side through {where}"
    return f"decode side: {ranks_named('D', d_tp)} {decode_does} through {where}"


@contextmanager
def bar(text: str, description: str = "") -> Iterator[Callable[..., None] | None]:
    """A transient progress bar on stderr: its task's ``update``; None when stderr is no terminal."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    err = Console(stderr=True)
    if not err.is_terminal:
        yield None
        return
    with Progress(TextColumn(text), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err,
                  transient=True) as shown:
        yield functools.partial(shown.update, shown.add_task(description, total=None))


@contextmanager
def progress() -> Iterator[tuple[Callable[[int], None] | None, Callable[[Any], None] | None]]:
    """A progress bar on stderr while pairings are checked; nothing when stderr is no terminal."""
    with bar("checking {task.description}") as update:
        if update is None:
            yield None, None
            return

        def done(result: Any) -> None:   # a pairing's result, either engine's
            update(advance=1, description=f"{result.model} {result.pairing}")

        yield (lambda total: update(total=total)), done
