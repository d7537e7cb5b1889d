"""``nas bench ...``: each experiment of the ``nas_benchmarks`` package adds its own subcommand."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmarks: strategies on NAS-Bench-201, scaling, overhead, training",
                       description="Benchmarks that print their figures side by side with a baseline.")
    bench_sub = p.add_subparsers(dest="bench", required=True, metavar="BENCHMARK")
    # The one import from the product up into the benchmarks: an entry point that discovers plugins (the
    # experiments nas_benchmarks lists); nothing else in nas/ imports them, and they import nas freely.
    import nas_benchmarks

    for module in nas_benchmarks.experiments():
        module.register(bench_sub)
