"""Options declared once, as the fields of typed groups, and commands built from them with click.

An option is declared by ``option(...)``: its names, help, panel (the box ``--help`` lists it
in) and default, once. A group is a frozen dataclass whose fields are options; a command's
function takes whole groups (``model: ModelArgs``) beside its own few options, and ``command``
turns the function into a ``click.Command``: each group's fields become click options, and at
call time they are collected back into the group's value before the function is called.

A command may narrow a group (``ModelArgs.given("model", "variant")``: only those options) or
require an option the group leaves optional (``required=("model",)``): the declaration stays the
group's.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Iterable

import click

MODEL, ENGINES, REQUEST, OUTPUT = "Model", "Engines", "Request", "Output"
OPTIONS = "Options"       # the panel of --help, --version and anything without a panel of its own


class Option(click.Option):
    """A click option that knows the panel ``--help`` lists it in."""

    def __init__(self, *args: Any, panel: str = OPTIONS, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.panel = panel


class Argument(click.Argument):
    """A click argument with the help ``--help`` shows beside it."""

    panel = "Arguments"

    def __init__(self, *args: Any, help: str = "", show_default: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = help
        self.show_default = show_default


@dataclass(frozen=True)
class Declared:
    """One option's declaration: what ``click.Option`` is built from."""

    names: tuple[str, ...]
    help: str
    panel: str
    type: Any = None
    show_default: bool = False
    metavar: str | None = None
    required: bool = False

    def build(self, name: str, default: Any, required: bool, command: str) -> Option:
        settings: dict[str, Any] = dict(help=self.help.replace("{command}", command), panel=self.panel,
                                        show_default=self.show_default, required=required or self.required)
        if self.metavar is not None:
            settings["metavar"] = self.metavar
        if any("/" in n for n in self.names):
            settings.update(is_flag=True, default=default)   # None: neither given (a tri-state flag)
        else:
            if default is not None:     # click tells an option not given from a None default
                settings["default"] = default
            if self.type is not None:
                settings["type"] = self.type
        return Option([*self.names, name], **settings)


def option(*names: str, help: str, panel: str, default: Any = None, kind: Any = None,
           show_default: bool | None = None, metavar: str | None = None) -> Any:
    """Declare an option: a dataclass field of a group, or a command function's parameter default.
    The default is shown in --help when there is one (``show_default`` overrides)."""
    if isinstance(kind, type) and issubclass(kind, Enum):
        kind = click.Choice(kind, case_sensitive=False)
    shown = default is not None if show_default is None else show_default
    declared = Declared(tuple(names), help, panel, kind, shown, metavar)
    return dataclasses.field(default=default, metadata={"option": declared})


def argument(name: str, *, help: str, type: Any, default: Any) -> Any:
    """Declare a command's positional argument (shown with its default)."""
    return dataclasses.field(default=default, metadata={"argument": (name, help, type)})


class Group:
    """A group of options: subclasses are frozen dataclasses whose fields are ``option(...)``.
    ``given(...)``: the group with only those options on the command line, the rest at their
    defaults; ``without(...)``: all but those."""

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


def _group_of(hint: Any) -> type | None:
    return hint if isinstance(hint, type) and issubclass(hint, Group) else None


def command(*, uses: dict[str, Narrowed] | None = None, required: Iterable[str] = (),
            defaults: dict[str, Any] | None = None) -> Callable[[Callable[..., None]], click.Command]:
    """The function as a click command. Its parameters: groups (annotated with a ``Group``), and
    its own options and argument (defaults made by ``option``/``argument``). ``uses``: a group
    parameter narrowed (``{"model": ModelArgs.given("model", "variant")}``); ``required``:
    options, by field name, this command cannot do without; ``defaults``: a group's option whose
    default this command sets otherwise (by field name)."""
    narrowed = uses or {}
    needed = set(required)
    own_defaults = defaults or {}

    def build(function: Callable[..., None]) -> click.Command:
        import inspect

        hints = typing.get_type_hints(function)
        params: list[click.Parameter] = []
        groups: dict[str, tuple[type, list[str]]] = {}
        for name, parameter in inspect.signature(function).parameters.items():
            group = _group_of(hints.get(name))
            if group is not None:
                use = narrowed.get(name)
                members = _fields(group, use.names if use else None)
                groups[name] = (group, [f.name for f in members])
                params.extend(_built(f, needed, own_defaults, function.__name__) for f in members)
                continue
            field = parameter.default
            assert isinstance(field, dataclasses.Field), f"{function.__name__}({name}): declare it with option()"
            if "argument" in field.metadata:
                shown, text, kind = field.metadata["argument"]
                if isinstance(kind, type) and issubclass(kind, Enum):
                    kind = click.Choice(kind, case_sensitive=False)
                params.append(Argument([name], type=kind, default=field.default, required=False,
                                       metavar=shown, help=text, show_default=True))
            else:
                params.append(_built(field, needed, own_defaults, function.__name__, name))
        taken = [p.name for p in params]
        assert len(taken) == len(set(taken)), f"{function.__name__}: an option declared twice"

        def callback(**values: Any) -> None:
            for name, (group, members) in groups.items():
                values[name] = group(**{member: values.pop(member) for member in members})
            function(**values)

        built = Command(function.__name__, callback=callback, params=params, help=function.__doc__)
        built.__doc__ = function.__doc__    # the command's own words, as the function's
        built.function = function
        return built

    return build


def _built(field: dataclasses.Field, needed: set[str], defaults: dict[str, Any], command: str,
           name: str | None = None) -> Option:
    declared: Declared = field.metadata["option"]
    name = name or field.name
    return declared.build(name, defaults.get(name, field.default), name in needed, command)


def changed_flags(value: Group, skip: Iterable[str] = ()) -> list[str]:
    """The options of a group's value given other than their default (but ``skip``), by their first name."""
    return [f.metadata["option"].names[0].split("/")[0] for f in _fields(type(value), None)
            if f.name not in skip and getattr(value, f.name) != f.default]


def given_flags(value: Group, group_fields: Iterable[str] | None = None) -> dict[str, Any]:
    """The options of a group's value that the command line gave (not None), by their first name."""
    return {f.metadata["option"].names[0].split("/")[0]: getattr(value, f.name)
            for f in _fields(type(value), group_fields) if getattr(value, f.name) is not None}


class Command(click.Command):
    """A command whose --help is ``render.help``'s (rich is imported only when help is shown);
    ``function``: the function it calls, with its groups."""

    function: Callable[..., None] | None = None

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from mambaxfer_cli.render.help import show_help

        show_help(self, ctx)
