"""Strategy speed: the time each registered strategy itself spends per ask+tell at a large population.

For every strategy (options: ``population`` where it has one, e.g. evolution and pbt), it first runs
``--population`` ask+tell pairs (so a population is full, a study holds that many trials, a controller
has that many rewards), then times ``--pairs`` more (or as many as fit in ``--seconds``, at least 20),
and prints the time per pair beside random search's, plus the cost and size of one snapshot
(``state_dict()`` through :func:`nas.run.snapshot.write_snapshot`, fsyncs included). Scores are
analytic (no training), so only the strategy is timed. Figures are printed, never asserted.

    python -m nas_benchmarks.strategy_speed                      # population 1,000 on the toy space
    python -m nas_benchmarks.strategy_speed --space macro --strategies evolution,rl --seconds 5

>>> row = measure("random", resolve_space("toy"), population=20, pairs=30)
>>> row["strategy"], row["pairs"]
('random', 30)
"""

from __future__ import annotations

import argparse
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
from nas.core.types import Arch, Result, TrialState
from nas.run.snapshot import write_snapshot


def bench_score(space: SearchSpace, arch: Arch) -> float:
    """A cheap objective with a known optimum on any space: minus the squared distance of the option
    indices to the middle option of each decision."""
    return -float(sum((i - (n - 1) / 2) ** 2 for i, n in zip(space.encode(arch), space.cardinalities)))


def population_options(name: str, population: int) -> dict[str, Any]:
    params = inspect.signature(registry.strategies.get(name).__init__).parameters
    return {"population": population} if "population" in params else {}


def _pairs(strategy: Any, space: SearchSpace, n: int, seconds: float | None) -> tuple[int, float]:
    """Run ``n`` ask+tell pairs, or as many as fit in ``seconds`` (at least 20)."""
    done, t0 = 0, time.perf_counter()
    while True:
        t = strategy.ask()
        strategy.tell(t, Result(t.trial_id, TrialState.COMPLETE, score=bench_score(space, t.arch), epoch=1))
        done += 1
        elapsed = time.perf_counter() - t0
        if done >= n or (seconds is not None and done >= 20 and elapsed >= seconds):
            return done, elapsed


def measure(name: str, space: SearchSpace, *, population: int = 1000, pairs: int = 1000,
            seconds: float = 2.0, seed: int = 0) -> dict[str, Any]:
    options = population_options(name, population)
    strategy = make_strategy(name, space, seed=seed, options=options)
    _, warmup = _pairs(strategy, space, population, None)
    pairs, elapsed = _pairs(strategy, space, pairs, seconds)
    state_s, size = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(3):
            t0 = time.perf_counter()
            size = write_snapshot(pathlib.Path(tmp) / "strategy.json", strategy.state_dict())
            state_s.append(time.perf_counter() - t0)
    return {"strategy": name, "options": options, "warmup_s": warmup, "pairs": pairs,
            "us_per_pair": elapsed / pairs * 1e6, "state_ms": statistics.median(state_s) * 1e3,
            "state_kb": size / 1024}


def report(rows: Sequence[dict[str, Any]], population: int, space: str) -> str:
    base = next((r["us_per_pair"] for r in rows if r["strategy"] == "random"), None)
    lines = [f"strategy time per ask+tell after {population:,} trials on space {space!r} (lower is better)",
             f"{'strategy':10s} {'options':22s} {'us/ask+tell':>12s} {'x random':>9s} {'pairs':>7s} "
             f"{'warm-up s':>9s} {'state ms':>9s} {'state KB':>9s}"]
    for r in rows:
        ratio = f"{r['us_per_pair'] / base:9.1f}" if base else f"{'-':>9s}"
        opts = ",".join(f"{k}={v}" for k, v in r["options"].items()) or "-"
        lines.append(f"{r['strategy']:10s} {opts:22s} {r['us_per_pair']:12.1f} {ratio} {r['pairs']:7d} "
                     f"{r['warmup_s']:9.2f} {r['state_ms']:9.2f} {r['state_kb']:9.1f}")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--population", type=int, default=1000,
                   help="population size, and the ask+tell pairs run before timing (default 1000)")
    p.add_argument("--space", default="toy", help="registered space or module:attr (default toy)")
    p.add_argument("--strategies", help="comma-separated names (default: every registered strategy)")
    p.add_argument("--pairs", type=int, default=1000, help="ask+tell pairs timed per strategy (default 1000)")
    p.add_argument("--seconds", type=float, default=2.0,
                   help="stop timing a slow strategy after this many seconds, 20 pairs at least (default 2)")
    p.add_argument("--seed", type=int, default=0)


def cmd_strategy_speed(args: argparse.Namespace) -> int:
    if args.population < 1:
        raise ValueError(f"--population must be >= 1, got {args.population}")
    if args.pairs < 1:
        raise ValueError(f"--pairs must be >= 1, got {args.pairs}")
    if not args.seconds > 0:
        raise ValueError(f"--seconds must be > 0, got {args.seconds}")
    names = registry.strategies.names() if not args.strategies else [
        s.strip() for s in args.strategies.split(",") if s.strip()]
    for name in names:
        registry.strategies.get(name)  # ValueError naming the known ones
    space = resolve_space(args.space)
    rows = []
    for name in names:
        rows.append(measure(name, space, population=args.population, pairs=args.pairs, seconds=args.seconds,
                            seed=args.seed))
        print(f"  {name}: {rows[-1]['us_per_pair']:.1f} us per ask+tell", file=sys.stderr, flush=True)
    print(report(rows, args.population, args.space))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("strategy-speed", help="each strategy's own time per ask+tell at a large population",
                       description=__doc__.split("\n\n")[0])
    add_arguments(p)
    p.set_defaults(handler=cmd_strategy_speed)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nas_benchmarks.strategy_speed", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        return cmd_strategy_speed(args)
    except ValueError as e:
        print(f"strategy_speed: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
