"""Options declared once, as the fields of typed groups (frozen dataclasses), and typer commands
built from them: ``command`` expands each group into typer's parameters and collects them back."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Iterable, Sequence

import typer

MODEL, ENGINES, REQUEST, OUTPUT = "Model", "Engines", "Request", "Output"

_running: ContextVar[typer.Context | None] = ContextVar("running", default=None)


def option(*names: str, help: str | Callable[[], str], panel: str, default: Any = None,
           parser: Callable[[str], Any] | None = None, show_default: bool | None = None, metavar: str | None = None,
           complete: Callable[[str], list[str]] | None = None) -> Any:
    """Declare an option (a group's field, or a command's parameter default); ``help`` may be a
    function, asked only where typer declares the option; the default is shown when there is one."""
    shown = default is not None if show_default is None else show_default
    settings = dict(help=help, rich_help_panel=panel, show_default=shown, metavar=metavar, parser=parser,
                    case_sensitive=False, autocompletion=complete)
    return dataclasses.field(default=default, metadata={"option": (names, settings)})


def argument(name: str, *, help: str, type: Any, default: Any) -> Any:
    """Declare a command's positional argument of ``type`` (shown with its default)."""
    return dataclasses.field(default=default, metadata={"argument": (type, typer.Argument(
        help=help, metavar=name, show_default=True, case_sensitive=False))})


class Group:
    """A group of options (a frozen dataclass of ``option(...)`` fields), narrowed by a command to
    the options it ``given(...)`` or takes ``without(...)``."""

    @classmethod
    def given(cls, *names: str) -> Narrowed:
        unknown = set(names) - {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        assert not unknown, f"{cls.__name__} has no option {unknown}"
        return Narrowed(cls, names)

    @classmethod
    def without(cls, *names: str) -> Narrowed:
        return cls.given(*[f.name for f in dataclasses.fields(cls) if f.name not in names])  # type: ignore[arg-type]


@dataclass(frozen=True)
class Narrowed:
    """A group as one command takes it: only some of its options."""

    group: type
    names: tuple[str, ...]


def _fields(group: type, names: Iterable[str] | None) -> list[dataclasses.Field]:
    chosen = None if names is None else set(names)
    return [f for f in dataclasses.fields(group) if chosen is None or f.name in chosen]


_hints = functools.cache(typing.get_type_hints)     # a group's, read once


def _group_of(hint: Any) -> type | None:
    return hint if isinstance(hint, type) and issubclass(hint, Group) else None


def command(*, uses: dict[str, Narrowed] | None = None, required: Iterable[str] = (),
            defaults: dict[str, Any] | None = None) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """The function as typer takes a command, its groups expanded; ``uses`` narrows a group,
    ``required`` and ``defaults`` (by field name) are this command's own for a group's options."""
    narrowed, needed, own_defaults = uses or {}, set(required), defaults or {}

    def build(function: Callable[..., None]) -> Callable[..., None]:
        hints = typing.get_type_hints(function)
        params = [inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)]
        groups: dict[str, tuple[type, list[str]]] = {}
        flags: dict[str, str] = {}     # each option's every name: its parameter's
        lazy: dict[str, Callable[[], inspect.Parameter]] = {}    # those whose help is asked for
        for name, parameter in inspect.signature(function).parameters.items():
            group = _group_of(hints.get(name))
            if group is None:
                params.append(_parameter(name, hints[name], parameter.default, needed, own_defaults, function, lazy))
                flags.update(dict.fromkeys(_names(parameter.default), name))
                continue
            use = narrowed.get(name)
            members = _fields(group, use.names if use else None)
            groups[name] = (group, [f.name for f in members])
            types = _hints(group)
            params += [_parameter(f.name, types[f.name], f, needed, own_defaults, function, lazy) for f in members]
            params += [_negative(f) for f in members if _negated(f)]
            flags.update((flag, f.name) for f in members for flag in _names(f))
        taken = [p.name for p in params]
        assert len(taken) == len(set(taken)), f"{function.__name__}: an option declared twice"

        def collected(ctx: typer.Context, **values: Any) -> None:
            for parameter in params[1:]:     # those a line left out (``for_line``): their defaults
                values.setdefault(parameter.name, parameter.default)
            for name, (group, members) in groups.items():
                for member in members:
                    if f"{member}{NEGATIVE}" in values:
                        values[member] = _switch(ctx, member, values[member], values.pop(f"{member}{NEGATIVE}"))
                values[name] = group(**{member: values.pop(member) for member in members})
            running = _running.set(ctx)
            try:
                function(**values)
            finally:
                _running.reset(running)

        collected.__name__ = collected.__qualname__ = function.__name__
        collected.__module__ = function.__module__
        # Each paragraph on one line, for the terminal to wrap.
        collected.__doc__ = "\n\n".join(" ".join(part.split()) for part in inspect.cleandoc(function.__doc__ or "")
                                        .split("\n\n"))
        collected.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        collected.function = function  # type: ignore[attr-defined]
        collected.flags, collected.lazy = flags, lazy  # type: ignore[attr-defined]
        return collected

    return build


def for_line(command: Callable[..., None], args: Sequence[str] | None) -> Callable[..., None]:
    """The command for one command line: only the options it names and the required ones (typer
    builds a validator for each option it declares); the whole command for help or an unknown one."""
    flags: dict[str, str] | None = getattr(command, "flags", None)
    if flags is None:
        return command
    named = {flags.get(arg.split("=")[0] if arg.startswith("--") else arg) for arg in args or () if arg[:1] == "-"}
    whole = args is None or None in named

    def narrowed(**values: Any) -> None:
        command(**values)

    functools.update_wrapper(narrowed, command)
    lazy: dict[str, Callable[[], inspect.Parameter]] = command.lazy  # type: ignore[attr-defined]
    narrowed.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        lazy[p.name]() if p.name in lazy else p for p in inspect.signature(command).parameters.values()
        if whole or p.default is inspect.Parameter.empty or p.name.removesuffix(NEGATIVE) in named
        or p.name.removesuffix(NEGATIVE) not in flags.values() or _many(p)])
    return narrowed


def _many(parameter: inspect.Parameter) -> bool:
    """An option given many times: typer hands it () where not given, not its default."""
    hint = typing.get_args(parameter.annotation)[0]
    return any(typing.get_origin(each) is list for each in (hint, *typing.get_args(hint)))


def _parameter(name: str, hint: Any, field: Any, needed: set[str], defaults: dict[str, Any],
               function: Callable[..., None], lazy: dict | None = None) -> inspect.Parameter:
    """One parameter of the signature typer reads, from its declaration; one whose help is a
    function gets none, and its maker in ``lazy`` (``for_line`` asks it)."""
    assert isinstance(field, dataclasses.Field), f"{function.__name__}({name}): declare it with option()"
    if "argument" in field.metadata:
        kind, info = field.metadata["argument"]
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=field.default,
                                 annotation=Annotated[kind | None, info])
    names, settings = field.metadata["option"]
    text = settings["help"]
    if not isinstance(text, str):
        if lazy is not None:
            lazy[name] = functools.partial(_parameter, name, hint, field, needed, defaults, function)
        text = "" if lazy is not None else text()
    text = text.replace("{command}", function.__name__)
    if _negated(field):
        on, off = names[0].split("/")
        names, text = (on, *names[1:]), f"{text} Off: {off}."
    info = typer.Option(*names, **{**settings, "help": text})
    default = inspect.Parameter.empty if name in needed else defaults.get(name, field.default)
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[hint, info])


# A switch declared "--on/--off" is two flags to typer: "--on", in --help with its help, and
# "--off", hidden and named in that help. Typer's help gives a switch's "--off" name a column of
# its own, and at 80 columns the longest pairs (--p-enable-prefix-caching/--p-no-enable-...) leave
# the names too little room: they were cut to an ellipsis.
NEGATIVE = "__off"


def _names(field: dataclasses.Field) -> list[str]:
    return [one for name in field.metadata.get("option", ((),))[0] for one in name.split("/")]


def _negated(field: dataclasses.Field) -> bool:
    names = field.metadata.get("option", ((),))[0]
    return bool(names) and "/" in names[0]


def _negative(field: dataclasses.Field) -> inspect.Parameter:
    names, settings = field.metadata["option"]
    off = names[0].split("/")[1]
    info = typer.Option(off, hidden=True, rich_help_panel=settings["rich_help_panel"])
    return inspect.Parameter(f"{field.name}{NEGATIVE}", inspect.Parameter.KEYWORD_ONLY, default=False,
                             annotation=Annotated[bool, info])


def _switch(ctx: typer.Context, name: str, on: Any, off: bool) -> Any:
    """A switch's value from its two flags: the one given (both: a usage error)."""
    if not off:
        return on
    if on and _source(ctx, name) in ("COMMANDLINE", "ENVIRONMENT"):
        flags = [p.opts[0] for p in ctx.command.params if p.name in (name, f"{name}{NEGATIVE}")]
        raise typer.BadParameter(f"give one of {' and '.join(flags)}, not both")
    return False


def _source(ctx: typer.Context, name: str) -> str | None:
    source = ctx.get_parameter_source(name)
    return source.name if source is not None else None


def given(name: str) -> bool:
    """Whether the running command's command line (or environment) gave option ``name`` (its
    parameter's name): a default the command sets is not given."""
    ctx = _running.get()
    if ctx is None:
        return False
    return any(_source(ctx, each) in ("COMMANDLINE", "ENVIRONMENT") for each in (name, f"{name}{NEGATIVE}"))


def running() -> typer.Context | None:
    """The running command's context (None outside a command)."""
    return _running.get()


def changed_flags(value: Group, skip: Iterable[str] = (), said: bool = False) -> list[str]:
    """The options of a group's value set other than their default (but ``skip``), by their first
    name; ``said``: also those the running command's line gave, whatever their value."""
    return [f.metadata["option"][0][0].split("/")[0] for f in _fields(type(value), None)
            if f.name not in skip and (getattr(value, f.name) != f.default or said and given(f.name))]


def given_flags(value: Group, group_fields: Iterable[str] | None = None) -> dict[str, Any]:
    """The options of a group's value that the command line gave (not None), by their first name."""
    return {f.metadata["option"][0][0].split("/")[0]: getattr(value, f.name)
            for f in _fields(type(value), group_fields) if getattr(value, f.name) is not None}
