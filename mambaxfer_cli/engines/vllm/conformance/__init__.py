"""``mambaxfer conformance``: the installed vLLM against mambaxfer's rules (only ``probe`` imports vLLM)."""

from __future__ import annotations

import sys
from typing import Callable

from mambaxfer_cli.errors import Refused, UserError
from mambaxfer_cli.engines.vllm.installed import installed_version

NOT_INSTALLED = ("no vLLM is installed beside mambaxfer (in {python}); conformance runs vLLM's own code, "
                 "so run it where vLLM is installed: in a new virtual environment, pip install "
                 "vllm==0.33.0, then pip install --no-deps -e . from your mambaxfer clone "
                 "(docs/conformance.md)")


def run(models: list[str], max_tp: int, start: Callable[[int], None] | None = None,
        done: Callable[[str, int, int], None] | None = None, every_preset: bool = False,
        speculative: str | None = None):
    """Compare the installed vLLM with mambaxfer's rules on ``models`` (--model names or paths) up to ``max_tp``;
    ``every_preset``: refused presets left out, with a note; ``speculative``: the drafted models alone."""
    version = installed_version()
    if version is None:
        raise UserError(NOT_INSTALLED.format(python=sys.prefix))
    from mambaxfer_cli.engines.vllm.conformance.adapter import Ours, release_for
    from mambaxfer_cli.engines.vllm.conformance.cases import DRAFT_CONFIG
    from mambaxfer_cli.engines.vllm.probe import layout_setting
    from mambaxfer_cli.engines.vllm.serve_args import CONV_LAYOUT_VAR

    ours = Ours(release_for(version))
    # A bad --model fails before vLLM loads; a model with MTP layers mambaxfer models runs again with them.
    specs, refused = [], []
    for name in models:
        try:
            specs += ours.with_drafted(name, ours.load(name), speculative)
        except Refused as exc:
            if not every_preset:
                raise
            refused.append(f"{name}: not compared: {exc}")
    set_here = layout_setting()
    from mambaxfer_cli.engines.vllm.conformance.compare import run as compare
    from mambaxfer_cli.engines.vllm.probe import installed

    try:
        vllm = installed()
    except Exception as exc:     # an install that does not import: nothing of it can be compared
        first = (str(exc).strip().splitlines() or [""])[0]
        raise UserError(f"vLLM {version} is installed here but does not import: "
                        f"{type(exc).__name__}: {first}") from None
    report = compare(specs, max_tp, vllm, ours, start, done, speculative or DRAFT_CONFIG)
    report.notes.extend(refused)
    if set_here:
        report.notes.append(f"{CONV_LAYOUT_VAR} was unset: set to DS for this run (NIXL's only conv layout)")
    if ours.release != ".".join(report.vllm_version.split(".")[:2]):
        report.notes.append(f"mambaxfer has no rules for vLLM {report.vllm_version}: compared with the newest "
                            f"it knows, {ours.release}'s")
    return report
