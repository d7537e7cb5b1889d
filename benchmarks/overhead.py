"""``nas bench overhead``: the marginal cost per trial of our Ray executor against Ray Tune's ``Tuner``.

Each side's fixed start-up is cancelled and shown apart.

Each side runs the same trivial trial (it returns at once; ``--sleep-ms`` adds a sleep) on the same number
of 1-CPU workers (default 2) on the same local Ray cluster, twice: with a small and a large number of
trials (default 100 and 500). Each run is timed whole, from building the side's workers to the last
result (Ray's own start is excluded from both). Then

- marginal cost per trial = (wall of the large run - wall of the small run) / (large - small): what each
  further trial costs, with every fixed cost cancelled;
- fixed start-up = wall of the small run - small x marginal cost: actor starts, Tune's set-up.

The sides:

- ours: :class:`nas.engine.ray_pool.RayExecutor` with :class:`nas.train.trainer.SleepTrainer`, driven by the
  search loop (random search) with the run's journal (a line fsynced per trial, as in a real run), and
  once without the journal;
- Ray Tune: ``Tuner(fit)`` of a function trainable, 1 CPU per trial,
  ``TuneConfig(num_samples=N, max_concurrent_trials=W, reuse_actors=True)`` (its fastest setting: an
  actor per worker, as ours; ``--tune default`` also runs Tune's default, a new actor per trial).

Needs ``ray[tune]`` (``pip install -e .[bench]``).
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from . import add_experiment
from .harness import text_table


def ours(n: int, seconds: float, workers: int, *, journal: bool = True) -> dict[str, Any]:
    """N trials of ``seconds`` each through our RayExecutor and loop (Ray must be initialised), with the
    run's journal (a line fsynced per finished trial, as in a real run) or without. ``total``: from
    building the actor pool to the last result; ``wall``: the loop alone."""
    from nas.engine.loop import SearchLoop
    from nas.engine.ray_pool import RayExecutor
    from nas.run.store import RunStore
    from nas.search_spaces.toy import ToySpace
    from nas.strategies.random import RandomSearch
    from nas.train.simple import sleeping

    space = ToySpace()
    t0 = time.perf_counter()
    executor = RayExecutor(space, None, None, workers=workers, train=sleeping(seconds))
    started = time.perf_counter() - t0
    try:
        with tempfile.TemporaryDirectory() as tmp:
            store = RunStore.create(Path(tmp) / "run", {"space": "toy", "strategy": "random"}) if journal else None
            loop = SearchLoop(RandomSearch(space, seed=0), executor, budget=n, poll_timeout=10.0, store=store)
            t1 = time.perf_counter()
            try:
                results = loop.run()
            finally:
                if store is not None:
                    store.close()
            wall = time.perf_counter() - t1
    finally:
        executor.shutdown()
    total = time.perf_counter() - t0
    summary = loop.summary()
    return {"side": "ours" if journal else "ours (no journal)", "trials": n, "sleep": seconds, "workers": workers,
            "wall": wall, "total": total, "complete": sum(r.ok for _, r in results), "actor_start": started,
            "loop_utilization": summary["utilization"], "prefetch": executor.prefetch.on}


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
            "workers": workers, "wall": wall, "total": wall, "complete": complete}


def derive(row: dict[str, Any]) -> dict[str, Any]:
    n, w, s, wall = row["trials"], row["workers"], row["sleep"], row["wall"]
    return {**row, "per_trial": wall / n, "lost_per_trial": (w * wall - n * s) / n, "utilization": n * s / (w * wall)}


def marginal(small: dict[str, Any], large: dict[str, Any]) -> dict[str, Any]:
    """One side's marginal cost per trial and fixed start-up, from a small and a large run.

    >>> marginal({"side": "x", "sleep": 0.0, "trials": 100, "total": 3.0, "complete": 100},
    ...          {"side": "x", "sleep": 0.0, "trials": 500, "total": 7.0, "complete": 500})["per_trial"]
    0.01
    """
    per_trial = (large["total"] - small["total"]) / (large["trials"] - small["trials"])
    return {"side": small["side"], "sleep": small["sleep"], "small": small, "large": large,
            "per_trial": per_trial, "fixed": small["total"] - small["trials"] * per_trial,
            "complete": f"{small['complete']}+{large['complete']}"}


def format_marginal(rows: list[dict[str, Any]]) -> str:
    head = ["side", "sleep (ms)", "done", "wall small (s)", "wall large (s)", "marginal ms/trial",
            "fixed start-up (s)"]
    return text_table([head] + [
        [r["side"], f"{1e3 * r['sleep']:.0f}", r["complete"], f"{r['small']['total']:.2f}",
         f"{r['large']['total']:.2f}", f"{1e3 * r['per_trial']:.2f}", f"{r['fixed']:.2f}"] for r in rows], rule=True)


def format_rows(rows: list[dict[str, Any]]) -> str:
    """The per-run table (one row per run; start-up not cancelled), for ``derive``d rows."""
    head = ["side", "sleep (ms)", "trials", "done", "wall (s)", "s/trial", "lost s/trial", "utilization",
            "loop util.", "actor start (s)"]
    return text_table([head] + [
        [r["side"], f"{1e3 * r['sleep']:.0f}", str(r["trials"]), str(r["complete"]), f"{r['wall']:.2f}",
         f"{r['per_trial']:.4f}", f"{r['lost_per_trial']:.4f}", f"{r['utilization']:.3f}",
         f"{r.get('loop_utilization', float('nan')):.3f}", f"{r.get('actor_start', float('nan')):.2f}"]
        for r in rows], rule=True)


def register(sub: argparse._SubParsersAction) -> None:
    p = add_experiment(sub, __doc__, cmd_overhead)
    p.add_argument("--trials", default="100,500", help="the small and the large run's trials (default 100,500)")
    p.add_argument("--workers", type=int, default=2, help="workers / concurrent trials, 1 CPU each (default 2)")
    p.add_argument("--sleep-ms", default="0", help="trial lengths in ms, comma-separated (default 0: trivial)")
    p.add_argument("--tune", choices=["reuse", "default", "both", "none"], default="reuse",
                   help="Tune with reuse_actors=True (default), with its default (an actor per trial), both, "
                        "or not at all")
    p.add_argument("--address", help="Ray cluster to join (default: start a local one)")


def cmd_overhead(args: argparse.Namespace) -> int:
    try:
        sleeps = [float(x) / 1e3 for x in args.sleep_ms.split(",")]
        small, large = (int(x) for x in args.trials.split(","))
    except ValueError:
        raise ValueError(f"--sleep-ms must be comma-separated numbers and --trials two integers, got "
                         f"{args.sleep_ms!r}, {args.trials!r}") from None
    if not 1 <= small < large or args.workers < 1 or not all(0 <= s < float("inf") for s in sleeps):
        raise ValueError(f"--trials must be two counts 1 <= small < large, --workers >= 1 and sleeps finite >= 0, got "
                         f"{args.trials}, {args.workers}, {args.sleep_ms}")
    from nas.api import connect

    connect(args.address, num_cpus=max(args.workers, os.cpu_count() or 1))
    sides: list[tuple[str, Any]] = [("ours", functools.partial(ours)), ("ours (no journal)",
                                                                        functools.partial(ours, journal=False))]
    if args.tune in ("reuse", "both"):
        sides.append(("tune (reuse_actors)", functools.partial(tune, reuse_actors=True)))
    if args.tune in ("default", "both"):
        sides.append(("tune (default)", functools.partial(tune)))
    rows = []
    for s in sleeps:
        for _, run in sides:
            rows.append(marginal(run(small, s, args.workers), run(large, s, args.workers)))
    print(f"{small} and {large} trials on {args.workers} workers (1 CPU each), Ray {_ray_version()}; "
          f"each run timed whole, start-up cancelled in the marginal cost and shown apart")
    print(format_marginal(rows))
    for s in sleeps:
        mine = next(r for r in rows if r["side"] == "ours" and r["sleep"] == s)
        for r in rows:
            if r["sleep"] == s and r["side"].startswith("tune"):
                print(f"{1e3 * s:.0f} ms trials: {r['side']} / ours, marginal cost per trial: "
                      f"{r['per_trial'] / max(mine['per_trial'], 1e-9):.1f}x; fixed start-up: "
                      f"{r['fixed']:.2f} s vs {mine['fixed']:.2f} s")
    return 0


def _ray_version() -> str:
    import ray

    return ray.__version__
