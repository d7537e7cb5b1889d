"""``nas bench strategy-speed``: the time each registered strategy itself spends per ask+tell at a large population.

Each strategy runs in the real :class:`nas.engine.loop.SearchLoop` on the in-process executor, one trial at a time,
with a scoring training function (:func:`.harness.scoring_executor`: :func:`bench_score`, no training).
``--population`` trials come first (options: ``population`` where the strategy has one, e.g. evolution and pbt; so a
population is full, a study holds that many trials, a controller has that many rewards), then ``--pairs`` more are
timed (or as many as fit in ``--seconds``, at least 20). Printed: the strategy's own ask+tell time per trial (the
loop's ``strategy_seconds``) beside random search's, the rest of the loop's time per trial apart (loop, executor,
scoring), and the cost and size of one snapshot (``state_dict()`` through :func:`nas.run.snapshot.write_snapshot`,
fsyncs included). Figures are printed, never asserted.

>>> row = measure("random", resolve_space("toy"), population=20, pairs=30)
>>> row["strategy"], row["pairs"]
('random', 30)
"""

from __future__ import annotations

import argparse
import functools
import inspect
import pathlib
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from nas.api import make_strategy, resolve_space
from nas.core import registry
from nas.core.space import SearchSpace
from nas.core.types import Arch
from nas.engine.interfaces import Callback, LoopStatus
from nas.engine.loop import SearchLoop
from nas.engine.stop import StopSignal
from nas.run.snapshot import write_snapshot

from . import add_experiment
from .harness import at_least, scoring_executor, strategy_names


def bench_score(space: SearchSpace, arch: Arch) -> float:
    """A cheap objective with a known optimum on any space: minus the squared distance of the option
    indices to the middle option of each decision."""
    return -float(sum((i - (n - 1) / 2) ** 2 for i, n in zip(space.encode(arch), space.cardinalities)))


class _Timer(Callback):
    """Marks the end of the ``warmup`` trials, then stops the loop ``pairs`` trials later (or after ``seconds``,
    20 trials at least)."""

    def __init__(self, warmup: int, pairs: int, seconds: float, stop: StopSignal) -> None:
        self.warmup, self.pairs, self.seconds, self.stop = warmup, pairs, seconds, stop
        self.done, self.t0 = 0, 0.0
        self.warm: tuple[float, float] = (0.0, 0.0)  # (wall, strategy seconds) when the warm-up ended
        self.timed: tuple[int, float, float] = (0, 0.0, 0.0)  # (pairs, wall, strategy seconds) after it

    def on_start(self, status: LoopStatus) -> None:
        self.t0 = time.perf_counter()

    def on_result(self, status: LoopStatus, trial: Any, result: Any) -> None:
        self.done += 1
        now = time.perf_counter()
        if self.done == self.warmup:
            self.warm = (now, status.strategy_seconds)
        elif self.done > self.warmup:
            n, wall = self.done - self.warmup, now - self.warm[0]
            self.timed = (n, wall, status.strategy_seconds - self.warm[1])
            if n >= self.pairs or (n >= 20 and wall >= self.seconds):
                self.stop.request()


def population_options(name: str, population: int) -> dict[str, Any]:
    params = inspect.signature(registry.strategies.get(name).__init__).parameters
    return {"population": population} if "population" in params else {}


def measure(name: str, space: SearchSpace, *, population: int = 1000, pairs: int = 1000,
            seconds: float = 2.0, seed: int = 0) -> dict[str, Any]:
    options = population_options(name, population)
    strategy = make_strategy(name, space, seed=seed, options=options)
    stop = StopSignal("wait")
    timer = _Timer(population, pairs, seconds, stop)
    executor = scoring_executor(space, functools.partial(bench_score, space))
    SearchLoop(strategy, executor, budget=population + pairs, callbacks=[timer], stop=stop).run()
    done, wall, strategy_s = timer.timed
    state_s, size = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(3):
            t0 = time.perf_counter()
            size = write_snapshot(pathlib.Path(tmp) / "strategy.json", strategy.state_dict())
            state_s.append(time.perf_counter() - t0)
    return {"strategy": name, "options": options, "warmup_s": timer.warm[0] - timer.t0, "pairs": done,
            "us_per_pair": strategy_s / done * 1e6, "rest_us_per_pair": (wall - strategy_s) / done * 1e6,
            "state_ms": statistics.median(state_s) * 1e3, "state_kb": size / 1024}


def report(rows: Sequence[dict[str, Any]], population: int, space: str) -> str:
    base = next((r["us_per_pair"] for r in rows if r["strategy"] == "random"), None)
    lines = [f"strategy time per ask+tell after {population:,} trials on space {space!r} (lower is better)",
             f"{'strategy':10s} {'options':22s} {'us/ask+tell':>12s} {'x random':>9s} {'loop us':>8s} {'pairs':>7s} "
             f"{'warm-up s':>9s} {'state ms':>9s} {'state KB':>9s}"]
    for r in rows:
        ratio = f"{r['us_per_pair'] / base:9.1f}" if base else f"{'-':>9s}"
        opts = ",".join(f"{k}={v}" for k, v in r["options"].items()) or "-"
        lines.append(f"{r['strategy']:10s} {opts:22s} {r['us_per_pair']:12.1f} {ratio} {r['rest_us_per_pair']:8.1f} "
                     f"{r['pairs']:7d} {r['warmup_s']:9.2f} {r['state_ms']:9.2f} {r['state_kb']:9.1f}")
    return "\n".join(lines)


def register(sub: argparse._SubParsersAction) -> None:
    p = add_experiment(sub, __doc__, cmd_strategy_speed)
    p.add_argument("--population", type=int, default=1000,
                   help="population size, and the trials run before timing (default 1000)")
    p.add_argument("--space", default="toy", help="registered space or module:attr (default toy)")
    p.add_argument("--strategies", help="comma-separated names (default: every registered strategy)")
    p.add_argument("--pairs", type=int, default=1000, help="ask+tell pairs timed per strategy (default 1000)")
    p.add_argument("--seconds", type=float, default=2.0,
                   help="stop timing a slow strategy after this many seconds, 20 pairs at least (default 2)")
    p.add_argument("--seed", type=int, default=0)


def cmd_strategy_speed(args: argparse.Namespace) -> int:
    at_least(1, population=args.population, pairs=args.pairs)
    if not args.seconds > 0:
        raise ValueError(f"--seconds must be > 0, got {args.seconds}")
    names = strategy_names(args.strategies)
    space = resolve_space(args.space)
    rows = []
    for name in names:
        rows.append(measure(name, space, population=args.population, pairs=args.pairs, seconds=args.seconds,
                            seed=args.seed))
        print(f"  {name}: {rows[-1]['us_per_pair']:.1f} us per ask+tell", file=sys.stderr, flush=True)
    print(report(rows, args.population, args.space))
    return 0
