"""The click that typer runs on: vendored inside recent typer releases, a dependency before."""

try:
    from typer import _click as click
except ImportError:  # typer releases that depend on click
    import click  # type: ignore[no-redef]

__all__ = ["click"]
