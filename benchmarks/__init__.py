"""The experiments behind ``nas bench``, outside the product: one module per experiment beside one shared harness.

Installed as the top-level package ``nas_benchmarks`` (``benchmarks/`` in a checkout). Every module named in
:data:`EXPERIMENTS` starts its docstring with a one-line summary and has ``register(subparsers)``, which adds
its subcommand (``handler`` set on the parser); ``nas bench`` (:mod:`nas.cli.bench`) reads the list. Adding an
experiment is one file here, its name in the list, and a test. The experiments import the product and
:mod:`nas_benchmarks.harness`; the product never imports them (but for that one entry point).
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: The experiments, in the order ``nas bench --help`` lists them: module names in this package.
EXPERIMENTS: tuple[str, ...] = (
    "nb201_strategies", "scaling", "overhead", "trainer_speed", "strategy_speed", "nb201_cells", "driver",
    "ray_poll", "reports", "asha_sim", "weight_inheritance", "inherit_search", "warm_start", "mo_train",
)


def experiments() -> list[ModuleType]:
    """The experiment modules, imported."""
    return [importlib.import_module(f"{__name__}.{name}") for name in EXPERIMENTS]
