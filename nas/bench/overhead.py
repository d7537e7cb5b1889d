"""``nas bench overhead``: per-trial overhead of our Ray executor against Ray Tune's ``Tuner``, side by side.

The same number of trials (default 200) of a trial that returns at once and of one that sleeps 50 ms,
on the same number of 1-CPU workers (default 2), on the same local Ray cluster:

- ours: :class:`nas.ray_executor.RayExecutor` with :class:`nas.trainer.SleepTrainer`, driven by the
  search loop (random search), with the journal (a line fsynced per trial, as in a real run) and
  without. Timed from the loop's start (the actor pool is already up: its start-up is shown apart)
  to its end.
- Ray Tune: ``Tuner(fit)`` of a function trainable that sleeps the same time, 1 CPU per trial,
  ``TuneConfig(num_samples=N, max_concurrent_trials=W, reuse_actors=True)`` (Tune's fastest setting,
  an actor per worker as ours; ``--tune default`` also runs Tune's default, a new actor per trial),
  Tune's defaults otherwise. Timed from the ``fit()`` call to its return, which includes starting its
  actors (a fixed cost with reuse, a cost per trial without).

Ray's own start is excluded from both. Per trial it prints the wall time per trial (wall / N), the
worker time lost per trial ((W x wall - N x sleep) / N), and the utilization N x sleep / (W x wall)
(for ours also the loop's measured utilization, from the workers' own trial times). Needs
``ray[tune]`` (``pip install -e .[bench]``).
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
import time
from typing import Any

from nas.bench import text_table


def ours(n: int, seconds: float, workers: int, *, journal: bool = True) -> dict[str, Any]:
    """N trials of ``seconds`` each through our RayExecutor and loop (Ray must be initialised), with the
    run's journal (a line fsynced per finished trial, as in a real run) or without."""
    from nas.journal import Journal, RunDir
    from nas.loop import SearchLoop
    from nas.ray_executor import RayExecutor
    from nas.search_spaces.toy import ToySpace
    from nas.strategies.random import RandomSearch
    from nas.trainer import SleepTrainer, TrainSettings

    space = ToySpace()
    t0 = time.perf_counter()
    executor = RayExecutor(space, None, TrainSettings(), workers=workers,  # type: ignore[arg-type]
                           trainer=functools.partial(SleepTrainer, seconds=seconds))  # type: ignore[arg-type]
    started = time.perf_counter() - t0
    try:
        with tempfile.TemporaryDirectory() as tmp, Journal(RunDir(tmp)) as journal_file:
            loop = SearchLoop(RandomSearch(space, seed=0), executor, budget=n, poll_timeout=10.0,
                              journal=journal_file if journal else None)
            t1 = time.perf_counter()
            results = loop.run()
            wall = time.perf_counter() - t1
    finally:
        executor.shutdown()
    summary = loop.summary()
    return {"side": "ours" if journal else "ours (no journal)", "trials": n, "sleep": seconds, "workers": workers,
            "wall": wall, "complete": sum(r.ok for _, r in results), "actor_start": started,
            "loop_utilization": summary["utilization"]}


def tune(n: int, seconds: float, workers: int, *, reuse_actors: bool = False) -> dict[str, Any]:
    """N trials of ``seconds`` each through Ray Tune's Tuner."""
    try:
        from ray import tune as rt
    except ImportError:
        raise ValueError("Ray Tune is not installed: pip install 'ray[tune]==2.60.0' (the bench extra)") from None

    def trainable(config: dict[str, Any]) -> dict[str, float]:
        # Nested, so Ray ships it by value: Tune's workers never import this package (nor torch).
        if seconds:
            time.sleep(seconds)
        return {"score": float(config["x"])}

    with tempfile.TemporaryDirectory() as tmp:
        tuner = rt.Tuner(
            rt.with_resources(trainable, {"cpu": 1}),
            param_space={"x": rt.uniform(0, 1)},
            tune_config=rt.TuneConfig(num_samples=n, max_concurrent_trials=workers, reuse_actors=reuse_actors),
            run_config=rt.RunConfig(storage_path=tmp, name="overhead", verbose=0),
        )
        t0 = time.perf_counter()
        grid = tuner.fit()
        wall = time.perf_counter() - t0
        complete = sum(grid[i].error is None for i in range(len(grid)))
    return {"side": "tune (reuse_actors)" if reuse_actors else "tune (default)", "trials": n, "sleep": seconds,
            "workers": workers, "wall": wall, "complete": complete}


def derive(row: dict[str, Any]) -> dict[str, Any]:
    n, w, s, wall = row["trials"], row["workers"], row["sleep"], row["wall"]
    return {**row, "per_trial": wall / n, "lost_per_trial": (w * wall - n * s) / n, "utilization": n * s / (w * wall)}


def format_rows(rows: list[dict[str, Any]]) -> str:
    head = ["side", "sleep (ms)", "trials", "done", "wall (s)", "s/trial", "lost s/trial", "utilization",
            "loop util.", "actor start (s)"]
    return text_table([head] + [
        [r["side"], f"{1e3 * r['sleep']:.0f}", str(r["trials"]), str(r["complete"]), f"{r['wall']:.2f}",
         f"{r['per_trial']:.4f}", f"{r['lost_per_trial']:.4f}", f"{r['utilization']:.3f}",
         f"{r.get('loop_utilization', float('nan')):.3f}", f"{r.get('actor_start', float('nan')):.2f}"]
        for r in rows], rule=True)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("overhead", help="per-trial overhead: our Ray executor against Ray Tune",
                       description=__doc__)
    p.add_argument("--trials", type=int, default=200, help="trials per measurement (default 200)")
    p.add_argument("--workers", type=int, default=2, help="workers / concurrent trials, 1 CPU each (default 2)")
    p.add_argument("--sleep-ms", default="0,50", help="trial lengths in ms, comma-separated (default 0,50)")
    p.add_argument("--tune", choices=["reuse", "default", "both", "none"], default="reuse",
                   help="Tune with reuse_actors=True (default), with its default (an actor per trial), both, "
                        "or not at all")
    p.add_argument("--address", help="Ray cluster to join (default: start a local one)")
    p.set_defaults(handler=cmd_overhead)


def cmd_overhead(args: argparse.Namespace) -> int:
    try:
        sleeps = [float(x) / 1e3 for x in args.sleep_ms.split(",")]
    except ValueError:
        raise ValueError(f"--sleep-ms must be comma-separated numbers, got {args.sleep_ms!r}") from None
    if args.trials < 1 or args.workers < 1 or any(s < 0 for s in sleeps):
        raise ValueError(f"--trials and --workers must be >= 1 and sleeps >= 0, got {args.trials}, "
                         f"{args.workers}, {args.sleep_ms}")
    from nas.api import connect

    connect(args.address, num_cpus=max(args.workers, os.cpu_count() or 1))
    rows = []
    for s in sleeps:
        rows.append(derive(ours(args.trials, s, args.workers)))
        rows.append(derive(ours(args.trials, s, args.workers, journal=False)))
        if args.tune in ("reuse", "both"):
            rows.append(derive(tune(args.trials, s, args.workers, reuse_actors=True)))
        if args.tune in ("default", "both"):
            rows.append(derive(tune(args.trials, s, args.workers)))
    print(f"{args.trials} trials on {args.workers} workers (1 CPU each), Ray {_ray_version()}")
    print(format_rows(rows))
    for s in sleeps:
        mine = next(r for r in rows if r["side"] == "ours" and r["sleep"] == s)
        for r in rows:
            if r["sleep"] == s and r["side"].startswith("tune"):
                print(f"{1e3 * s:.0f} ms trials: {r['side']} / ours, wall time per trial: "
                      f"{r['per_trial'] / mine['per_trial']:.1f}x; lost worker time per trial: "
                      f"{r['lost_per_trial'] / max(mine['lost_per_trial'], 1e-9):.1f}x")
    return 0


def _ray_version() -> str:
    import ray

    return ray.__version__
