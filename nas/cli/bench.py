"""``nas bench ...``: each benchmark module adds its own subcommand through ``register(subparsers)``."""

from __future__ import annotations

import argparse
import importlib

#: One module per benchmark; each defines ``register(subparsers)`` and sets ``handler`` on its parser.
BENCH_MODULES: list[str] = ["nas.bench.strategies", "nas.bench.scaling", "nas.bench.overhead", "nas.bench.train",
                            "nas.bench.strategy_speed", "nas.bench.cells", "nas.bench.driver", "nas.bench.ray_poll",
                            "nas.bench.reports", "nas.bench.asha_sim", "nas.bench.inherit", "nas.bench.inherit_search",
                            "nas.bench.warmstart", "nas.bench.mo_train"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmarks: strategies on NAS-Bench-201, scaling, overhead, training",
                       description="Benchmarks that print their figures side by side with a baseline.")
    bench_sub = p.add_subparsers(dest="bench", required=True, metavar="BENCHMARK")
    for module in BENCH_MODULES:
        importlib.import_module(module).register(bench_sub)
