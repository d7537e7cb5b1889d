"""Configuration fields that describe themselves: a dataclass field made with :func:`option` carries its help text,
its choices, its command-line flag and whether it defines a run, so the ``nas search`` flags, the config-file keys
and ``run.json`` all come from the one declaration (:mod:`nas.run.config` walks them).

>>> import dataclasses
>>> @dataclasses.dataclass
... class Example:
...     epochs: int = option(5, help="training epochs per trial")
...     device: str = option("auto", help="where trials train", choices=("auto", "cpu"), runtime=True)
>>> about(dataclasses.fields(Example)[1])
About(help='where trials train', choices=('auto', 'cpu'), flag=None, metavar=None, runtime=True, fact=False, name=None)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

MISSING: Any = dataclasses.MISSING


class About(NamedTuple):
    """What a field says of itself. ``flag``: the command-line option strings (default ``--the-name``);
    ``runtime``: how a run executes, not what it is (a resume may change it); ``fact``: recorded in run.json from
    what the run was given (a content fingerprint, a class name), never set by a flag or a config file;
    ``name``: its key on the command line and in flat config files (default: the field's name)."""

    help: str
    choices: tuple[str, ...] = ()
    flag: tuple[str, ...] | None = None
    metavar: str | None = None
    runtime: bool = False
    fact: bool = False
    name: str | None = None


def option(default: Any = MISSING, *, help: str, factory: Callable[[], Any] | None = None,  # noqa: A002
           choices: Sequence[str] = (), flag: str | Sequence[str] | None = None, metavar: str | None = None,
           runtime: bool = False, fact: bool = False, name: str | None = None) -> Any:
    """A dataclass field with its :class:`About` in the metadata (``factory`` for a mutable default)."""
    flags = (flag,) if isinstance(flag, str) else None if flag is None else tuple(flag)
    meta = {"about": About(help, tuple(choices), flags, metavar, runtime, fact, name)}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def about(field: dataclasses.Field[Any]) -> About | None:
    """The :class:`About` of a field made by :func:`option` (None for any other field)."""
    found = field.metadata.get("about")
    return found if isinstance(found, About) else None


__all__ = ["About", "about", "option"]
