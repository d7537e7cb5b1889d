"""The experiments behind ``nas bench``, outside the product: one module per experiment beside one shared harness.

Installed as the top-level package ``nas_benchmarks`` (``benchmarks/`` in a checkout). Every module named in
:data:`EXPERIMENTS` starts its docstring with the one line ``nas bench NAME``: SUMMARY. and has
``register(subparsers)``, which adds that subcommand (:func:`add_experiment`); ``nas bench`` (:mod:`nas.cli.bench`)
reads the list. Adding an experiment is one file here, its name in the list, and a test. The experiments import the
product and :mod:`nas_benchmarks.harness`; the product never imports them (but for that one entry point).
"""

from __future__ import annotations

import argparse
import importlib
import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

#: The experiments, in the order ``nas bench --help`` lists them: module names in this package.
EXPERIMENTS: tuple[str, ...] = (
    "nb201_strategies", "scaling", "overhead", "trainer_speed", "strategy_speed", "nb201_cells", "driver",
    "ray_poll", "asha_train", "report_cost", "asha_sim", "weight_inheritance", "inherit_search", "warm_start",
    "mo_train", "snapshot_size", "gangs", "nb201_proxies", "nb201_optimum", "two_stage",
    "supernet_ranks", "cli_latency", "importance_cost",
)


def experiments() -> list[ModuleType]:
    """The experiment modules, imported."""
    return [importlib.import_module(f"{__name__}.{name}") for name in EXPERIMENTS]


def command(doc: str | None) -> tuple[str, str]:
    """The (NAME, SUMMARY) an experiment's module docstring starts with: the one line ``nas bench NAME``: SUMMARY.

    >>> command("``nas bench asha``: evolution with and without ASHA.\n\nMore prose.")
    ('asha', 'evolution with and without ASHA')
    """
    first = (doc or "").split("\n", 1)[0]
    m = re.fullmatch(r"``nas bench ([a-z0-9-]+)``: (.+)\.", first)
    if m is None:
        raise ValueError(f"an experiment's docstring must start with ``nas bench NAME``: SUMMARY., got {first!r}")
    return m[1], m[2]


def add_experiment(sub: Any, doc: str | None, handler: Callable[[Any], int]) -> Any:
    """The subcommand :func:`command` names, with its summary as the help and the docstring up to its examples as
    the description; ``handler`` runs it."""
    name, summary = command(doc)
    p = sub.add_parser(name, help=summary, description=(doc or "").split("\n\n>>>")[0],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    for action in (None, "store"):
        p.register("action", action, _Store)
    p.register("action", "append", _Append)
    p.set_defaults(handler=handler)
    return p


def _refuse_blank(action: argparse.Action, values: Any) -> None:
    """A flag's text value that is empty or blank, refused as the parser refuses a bad value (usage and one line,
    exit 2): it was read as "not given" and silently meant every strategy, a local Ray cluster or the defaults."""
    if isinstance(values, str) and not values.strip():
        raise argparse.ArgumentError(action, f"{values!r} is empty; give a value")


class _Store(argparse._StoreAction):
    """``store`` for an experiment's flags: a blank text value refused, and the flag's ``dest`` kept in
    ``given`` (see :func:`nas_benchmarks.harness.given`), so that ``--quick`` sets only what was not typed."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        _refuse_blank(self, values)
        super().__call__(parser, namespace, values, option_string)
        namespace.__dict__.setdefault("given", set()).add(self.dest)


class _Append(argparse._AppendAction):
    """``append`` for an experiment's flags: a blank text value refused (``-o ''``)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        _refuse_blank(self, values)
        super().__call__(parser, namespace, values, option_string)
