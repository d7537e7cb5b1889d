"""``nas bench gang``: one candidate on gangs of 1, 2, 4 ranks (DDP), and warm gangs against Ray Train starts.

Two tables, side by side in one command, on a local Ray cluster:

1. Scaling: the same candidate (``--space``/``--arch``, default the macro space's 2-block CNN) on the same data
   (``--dataset``, default ``synthetic-32``: 3x32x32 images), the same global batch (``--batch-size``, split evenly
   over the ranks: each trains its own shard, DDP averages the gradients), optimizer and epochs: a trainer actor of
   the usual pool (:class:`nas.engine.ray_pool.RayExecutor`), then gangs
   (:class:`nas.engine.gang_executor.GangExecutor`) of each of ``--ranks`` (default 1, 2, and 4 where the machine
   has 4 cores), 1 CPU and 1 torch thread per rank.
   Per row, medians of ``--repeats`` trials, interleaved across the sides (all held at once: Ray's CPUs are
   reservations, and one trial trains at a time): training samples per second (every rank's samples over the
   training function's seconds, validation included), the speed-up over the actor, the final validation accuracy
   after the same epochs, and the fixed costs apart: the pool's or gang's start (once) and, per trial, the wall time
   from submit to result minus the training function's seconds.
2. Fixed cost per trial: ``--trials`` short trials (a small MLP on digits, 1 epoch) on one warm gang of
   ``--gang-ranks`` ranks, against the same trials each started as a Ray Train ``TorchTrainer`` with as many workers
   (:mod:`nas_benchmarks.gang_baseline`), as Ray Tune runs data-parallel trials. Per side: the start-up paid once,
   the median wall time per trial, the median training seconds inside, and their difference, the fixed cost per
   trial; the last column is Ray Train's fixed cost over ours.

Speed is printed, never asserted. On a machine shared with other work, read the speed-up with the load in mind.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time
from typing import Any

from nas.cli.common import file_arg
from nas.core.types import Trial
from nas.engine.protocol import KeepRule, finished

from . import add_experiment
from .harness import at_least, int_list, text_table, write_json
from .trainer_speed import DEFAULT_ARCHS, bench_dataset


def one_trial(ex: Any, trial: Trial) -> tuple[float, Any]:
    """Submit ``trial`` to ``ex`` and wait for its result: (wall seconds from submit to result, result)."""
    t0 = time.perf_counter()
    ex.submit(trial, keep=KeepRule())
    results: list[Any] = []
    while not results:
        results = [r for _, r in finished(ex.poll(timeout=120))]
    wall = time.perf_counter() - t0
    while not ex.free_slots():  # (a gang's other ranks end just after)
        ex.poll(timeout=120)
    if not results[0].ok:
        raise RuntimeError(f"trial {trial.trial_id} failed: {results[0].error}")
    return wall, results[0]


def executor(space: Any, data: Any, settings: Any, ranks: int, *, name: str, gpus: float = 0.0) -> tuple[Any, float]:
    """A plain trainer actor (``ranks`` 0) or a gang of ``ranks`` (``gpus`` each), and the seconds it took to start."""
    from nas.engine.gang_executor import GangExecutor
    from nas.engine.ray_pool import RayExecutor

    t0 = time.perf_counter()
    if ranks == 0:
        ex: Any = RayExecutor(space, data, settings, workers=1, prefetch=False, name_prefix=name, start_timeout=600,
                              gpus_per_trial=gpus)
    else:
        ex = GangExecutor(space, data, settings, trial_workers=ranks, name_prefix=name, start_timeout=600,
                          gpus_per_trial=gpus)
    return ex, time.perf_counter() - t0


def scaling(space: Any, arch: Any, data: Any, settings: Any, ranks: list[int], repeats: int, gpus: float = 0.0
            ) -> list[dict[str, Any]]:
    """Each side (0: the trainer actor) trains the candidate ``repeats`` times, the same trial each time; medians.
    Where the cluster's CPUs hold every side at once, all are started first and the repeats interleave (one trial
    at a time, so they never share the cores), so that a change in the machine's load hits every side alike."""
    import ray

    sides = [0, *ranks]
    cluster = ray.cluster_resources()
    together = 1 + sum(ranks) <= cluster.get("CPU", 0) and gpus * (1 + sum(ranks)) <= cluster.get("GPU", 0) + 1e-9
    runs: dict[int, list[tuple[float, Any]]] = {r: [] for r in sides}
    held: dict[int, tuple[Any, float]] = {}

    def start(r: int) -> None:
        per_rank = dataclasses.replace(settings, batch_size=settings.batch_size // max(r, 1))
        held[r] = executor(space, data, per_rank, r, name=f"nas-bench-gang-{r}-{os.getpid()}", gpus=gpus)

    def stop(r: int) -> None:
        held[r][0].shutdown()

    try:
        for r in sides if together else []:
            start(r)
        for r in ([] if together else sides):  # one side at a time
            start(r)
            runs[r] += [one_trial(held[r][0], Trial(0, arch)) for _ in range(repeats)]
            stop(r)
        for _ in range(repeats if together else 0):
            for r in sides:
                runs[r].append(one_trial(held[r][0], Trial(0, arch)))
    finally:
        for r in held:
            stop(r)
    rows = []
    for r in sides:
        metrics = [res.metrics for _, res in runs[r]]
        rows.append({"ranks": r, "batch_per_rank": settings.batch_size // max(r, 1), "repeats": repeats,
                     "backend": getattr(held[r][0], "backend", "-"), "device": metrics[0]["device"],
                     "samples_per_second": statistics.median(m["samples_per_second"] for m in metrics),
                     "val_acc": statistics.median(m["val_acc"] for m in metrics), "start_up": held[r][1],
                     "train": statistics.median(m["train_seconds"] for m in metrics),
                     "per_trial_fixed": statistics.median(w - res.metrics["train_seconds"] for w, res in runs[r]),
                     "interleaved": together})
    print(format_scaling(rows), flush=True)
    return rows


def format_scaling(rows: list[dict[str, Any]]) -> str:
    base = rows[0]["samples_per_second"]
    out = [["side", "device", "batch/rank", "samples/s", "speed-up", "val_acc", "start-up (s)", "fixed s/trial"]]
    for r in rows:
        side = "trainer actor" if r["ranks"] == 0 else f"gang of {r['ranks']} ({r['backend']})"
        out.append([side, r["device"], str(r["batch_per_rank"]), f"{r['samples_per_second']:.0f}",
                    f"{r['samples_per_second'] / base:.2f}x", f"{r['val_acc']:.4f}", f"{r['start_up']:.1f}",
                    f"{r['per_trial_fixed']:.3f}"])
    return text_table(out, rule=True)


def fixed_costs(ranks: int, trials: int, ray_train_trials: int, seed: int) -> list[dict[str, Any]]:
    from nas.search_spaces.toy import TOY_OPTIMUM, ToySpace
    from nas.train.data import load_dataset
    from nas.train.settings import TrainSettings

    from .gang_baseline import ray_train_trials as ray_train

    data, space = load_dataset("digits", seed=seed), ToySpace()
    settings = TrainSettings(epochs=1, batch_size=32, lr=1e-2, device="cpu", seed=seed, measure_costs=False)
    ex, start = executor(space, data, settings, ranks, name=f"nas-bench-gang-fixed-{os.getpid()}")
    try:
        ours = [one_trial(ex, Trial(k, TOY_OPTIMUM)) for k in range(trials)]
    finally:
        ex.shutdown()
    rows = [{"side": f"warm gang of {ranks}", "start_up": start, "wall": [w for w, _ in ours],
             "train": [r.metrics["train_seconds"] for _, r in ours]}]
    print(f"warm gang of {ranks}: {statistics.median(w for w, _ in ours):.3f} s per trial; now {ray_train_trials} "
          f"Ray Train fits (each starts its own workers: seconds per trial)", flush=True)
    t0 = time.perf_counter()
    theirs = ray_train(space, TOY_OPTIMUM, data, ranks=ranks, trials=ray_train_trials, epochs=1, batch_size=32,
                       lr=1e-2, seed=seed)
    rows.append({"side": f"Ray Train TorchTrainer x {ranks}", "start_up": None, "wall": [t["wall"] for t in theirs],
                 "train": [t["train"] for t in theirs], "total": time.perf_counter() - t0})
    print(format_fixed(rows), flush=True)
    return rows


def format_fixed(rows: list[dict[str, Any]]) -> str:
    out = [["side", "trials", "start-up once (s)", "wall s/trial", "training s/trial", "fixed s/trial", "vs ours"]]
    fixed = [statistics.median(w - t for w, t in zip(r["wall"], r["train"])) for r in rows]
    for r, f in zip(rows, fixed):
        start = "- (per trial)" if r["start_up"] is None else f"{r['start_up']:.1f}"
        out.append([r["side"], str(len(r["wall"])), start, f"{statistics.median(r['wall']):.3f}",
                    f"{statistics.median(r['train']):.3f}", f"{f:.3f}", f"{f / max(fixed[0], 1e-9):.0f}x"])
    return text_table(out, rule=True)


def register(sub: argparse._SubParsersAction) -> None:
    p = add_experiment(sub, __doc__, handler)
    cores = os.cpu_count() or 1
    p.add_argument("--ranks", default="1,2,4" if cores >= 4 else "1,2",
                   help="gang sizes of the scaling table (default 1,2, and 4 with 4 cores or more)")
    p.add_argument("--space", default="macro", help="the candidate's space (default macro)")
    p.add_argument("--arch", help="the candidate, as the space formats it (default: trainer_speed's for the space)")
    p.add_argument("--dataset", default="synthetic-32", help="synthetic-32 (default), images-32, digits, ...")
    p.add_argument("--samples", type=int, default=4096, help="samples of a synthetic dataset (default 4096)")
    p.add_argument("--epochs", type=int, default=2, help="epochs of the scaling trials (default 2)")
    p.add_argument("--repeats", type=int, default=3, help="trials per side of the scaling table, medians (default 3)")
    p.add_argument("--batch-size", type=int, default=128, help="global batch, split over the ranks (default 128)")
    p.add_argument("--trials", type=int, default=6, help="short trials on the warm gang (default 6)")
    p.add_argument("--ray-train-trials", type=int, default=3, help="Ray Train trials (default 3)")
    p.add_argument("--gang-ranks", type=int, default=2, help="ranks of the fixed-cost comparison (default 2)")
    p.add_argument("--gpus-per-rank", type=float, default=0.0,
                   help="GPUs per rank (and for the actor) in the scaling table: 1 gives each its own GPU and NCCL, "
                        "a fraction shares one over gloo (default 0: CPUs)")
    p.add_argument("--skip", choices=["scaling", "fixed"], help="leave one table out")
    p.add_argument("--json", type=file_arg, help="write the figures to this file")
    p.add_argument("--seed", type=int, default=0)


def handler(args: argparse.Namespace) -> int:
    ranks = int_list(args.ranks, "--ranks")
    at_least(1, ranks=min(ranks), epochs=args.epochs, repeats=args.repeats, batch_size=args.batch_size,
             trials=args.trials, ray_train_trials=args.ray_train_trials, gang_ranks=args.gang_ranks,
             samples=args.samples)
    if not 0 <= args.gpus_per_rank < float("inf"):
        raise ValueError(f"--gpus-per-rank must be a finite number >= 0, got {args.gpus_per_rank}")
    if args.batch_size % max(ranks):
        raise ValueError(f"--batch-size {args.batch_size} must split evenly over {max(ranks)} ranks")
    from nas.api import connect, resolve_space
    from nas.train.settings import TrainSettings

    # Ray's CPUs are reservations: every side of the scaling table is held at once (1 + sum of --ranks), one trains
    connect(num_cpus=max(os.cpu_count() or 1, 1 + sum(ranks)))
    out: dict[str, Any] = {}
    if args.skip != "scaling":
        space = resolve_space(args.space)
        arch = space.parse(args.arch or DEFAULT_ARCHS.get(args.space, ""))
        data = bench_dataset(args.dataset, samples=args.samples, seed=args.seed)
        settings = TrainSettings(epochs=args.epochs, batch_size=args.batch_size, seed=args.seed, measure_costs=False,
                                 device="cuda" if args.gpus_per_rank else "cpu")
        print(f"{args.space} candidate on {args.dataset} ({len(data.x_train)} training samples), {args.epochs} "
              f"epochs at a global batch of {args.batch_size}; 1 CPU and 1 torch thread per rank", flush=True)
        out["scaling"] = scaling(space, arch, data, settings, ranks, args.repeats, args.gpus_per_rank)
    if args.skip != "fixed":
        print(f"fixed cost per trial: {args.trials} short trials (toy MLP, digits, 1 epoch) on a warm gang of "
              f"{args.gang_ranks}, {args.ray_train_trials} as Ray Train TorchTrainer fits", flush=True)
        out["fixed"] = fixed_costs(args.gang_ranks, args.trials, args.ray_train_trials, args.seed)
    write_json(args.json, out)
    return 0
