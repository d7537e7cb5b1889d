"""``nas strategies`` and ``nas spaces``: each registered entry, its first doc line, and its options with
their defaults (the constructor's keyword parameters), and ``tidy_help``: argparse texts without reST."""

from __future__ import annotations

import argparse
import contextlib
import inspect
import re
import sys
from typing import Any

_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


def plain(text: str) -> str:
    """Docstring markup as plain text.

    >>> plain("Each run is one :class:`nas.engine.loop.SearchLoop` (``--trials`` of them).")
    'Each run is one nas.engine.loop.SearchLoop (--trials of them).'
    """
    return _LITERAL.sub(r"\1", _ROLE.sub(r"\1", text))


#: constructor parameters the run sets (the space; --seed, --objective; a scheduler's --epochs), never an option
RUN_SET = ("self", "space", "seed", "objectives", "max_epochs")


def options(cls: Any) -> list[tuple[str, Any]]:
    """(name, default) of the constructor's options (``seed``, ``objectives`` and a scheduler's ``max_epochs`` aside:
    the run's ``--seed``, ``--objective`` and ``--epochs`` set them, and no option may).

    >>> class S:
    ...     def __init__(self, space, *, seed=None, population: int = 50, dedup=False): ...
    >>> options(S)
    [('population', 50), ('dedup', False)]
    >>> from nas.schedulers.median import MedianStopping
    >>> options(MedianStopping)
    [('grace_period', 1), ('min_samples', 3)]
    >>> from nas.schedulers.asha import ASHA
    >>> options(ASHA)  # (grace_period=None was listed where the docs say 1)
    [('eta', 3), ('grace_period', 1), ('variant', 'stopping'), ('levels', None)]
    """
    params = inspect.signature(cls.__init__).parameters.values()
    shown = getattr(cls, "shown_defaults", {})  # (a None that stands for a value: ASHA's grace_period, 1)
    out = []
    for p in params:
        if p.name in RUN_SET or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.kind is p.KEYWORD_ONLY or (p.default is not p.empty):
            out.append((p.name, shown.get(p.name, None if p.default is p.empty else p.default)))
    return out


def summary(cls: Any, module_first: bool = False) -> str:
    """The first line of the class's docstring (``module_first``: of its module's, a strategy's paper)."""
    docs = [cls.__doc__, sys.modules[cls.__module__].__doc__]
    doc = next((d for d in (docs[::-1] if module_first else docs) if d and d.strip()), "")
    lines = doc.strip().splitlines()
    return plain(lines[0]) if lines else ""


def listing(entries: list[tuple[str, Any]], size: bool = False, module_first: bool = False) -> str:
    """One block per entry: name, (size), the first doc line, then ``option=default`` pairs."""
    blocks = []
    for name, cls in entries:
        head = name
        if size:
            with contextlib.suppress(Exception):
                head += f"  ({cls().size:,d} architectures)"
        opts = options(cls)
        text = f"{head}\n    {summary(cls, module_first)}"
        if opts:
            text += "\n    options: " + ", ".join(f"{k}={v!r}" for k, v in opts)
        blocks.append(text)
    return "\n".join(blocks)


_DEFAULT = re.compile(r"\s*\(default: [^()]*\)$")


def tidy_help(parser: argparse.ArgumentParser) -> None:
    """Every description and help of ``parser`` and its subcommands in plain text, with no doubled default
    (a help that names its default already loses the "(default: ...)" appended to it; so does "(default: None)")."""
    if parser.description:
        parser.description = plain(parser.description)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                choice.help = plain(choice.help) if choice.help else choice.help
            for sub in action.choices.values():
                tidy_help(sub)
        elif action.help and action.help is not argparse.SUPPRESS:
            text = plain(action.help)
            m = _DEFAULT.search(text)
            if m and ("default" in text[: m.start()].lower() or m.group(0).strip() == "(default: None)"):
                text = text[: m.start()]
            action.help = text
