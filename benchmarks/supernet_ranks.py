"""``nas bench supernet-ranks``: supernet training on one Ray actor against a data-parallel gang of N, side by side.

Both sides run :class:`nas.engine.supernet_actor.SupernetGang` on the same private local Ray cluster (``--cpus``,
default 2) with the same seed, the macro supernet on digits, ``--batch-size`` rows per step in all (N ranks:
``batch/N`` rows each, so both take the same optimizer steps), one torch thread per rank. Printed for each side:
the start-up (placement group, actors, the data on each, joining the process group: fixed, shown apart), the
training seconds per epoch after the first (the first pays torch's first-call costs) and the samples per second
that makes, and the ratio of the gang's samples/s to the single actor's.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from . import add_experiment
from .harness import text_table


def run_side(ranks: int, args: argparse.Namespace, data: Any) -> dict[str, Any]:
    from nas.engine.supernet_actor import SupernetGang, SupernetJob
    from nas.search_spaces.macro import MacroSpace
    from nas.train.settings import TrainSettings

    settings = TrainSettings(device="cpu", threads=1, lr=3e-3, batch_size=args.batch_size // ranks, seed=0)
    t0 = time.perf_counter()
    gang = SupernetGang(MacroSpace(), data, settings, SupernetJob(args.epochs, "uniform", 0), ranks=ranks)
    startup = time.perf_counter() - t0
    try:
        walls, records = [], []
        t = time.perf_counter()
        for done in gang.train():
            now = time.perf_counter()
            walls.append(now - t)
            records.append(done.record)
            t = now
    finally:
        gang.shutdown()
    later = walls[1:] or walls
    epoch_s = statistics.median(later)
    samples = records[-1]["samples"]
    return {"ranks": ranks, "startup_s": startup, "epoch_s": epoch_s, "samples": samples,
            "samples_per_s": samples / epoch_s, "steps": records[-1]["steps"],
            "last_loss": records[-1]["train_loss"]}


def handler(args: argparse.Namespace) -> int:
    from nas.engine.cluster import start_local
    from nas.train.data import load_dataset

    if args.epochs < 2:
        raise ValueError(f"--epochs must be >= 2 (the first epoch is not timed), got {args.epochs}")
    if args.ranks < 2 or args.ranks > args.cpus:
        raise ValueError(f"--ranks must be in 2..--cpus ({args.cpus}), got {args.ranks}")
    data = load_dataset("digits", seed=0)
    start_local(num_cpus=args.cpus)
    sides = [run_side(1, args, data), run_side(args.ranks, args, data)]
    base = sides[0]["samples_per_s"]
    rows = [[str(s["ranks"]), f"{s['startup_s']:.1f}", str(s["steps"]), f"{s['epoch_s']:.3f}",
             f"{s['samples_per_s']:,.0f}", f"{s['samples_per_s'] / base:.2f}x", f"{s['last_loss']:.4f}"]
            for s in sides]
    print(f"nas bench supernet-ranks: macro supernet on digits ({len(data.x_train):,} train rows), "
          f"{args.epochs} epochs, {args.batch_size} rows per step in all, {args.cpus} CPUs, 1 thread per rank")
    print(text_table([["ranks", "start-up s", "steps/epoch", "epoch s (median after the 1st)", "samples/s",
                       "vs 1 rank", "last loss"], *rows], rule=True))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = add_experiment(sub, __doc__, handler)
    p.add_argument("--ranks", type=int, default=2, help="ranks of the data-parallel side (default 2)")
    p.add_argument("--epochs", type=int, default=4, help="epochs per side (default 4; the first is not timed)")
    p.add_argument("--batch-size", type=int, default=128, help="rows per optimizer step over all ranks (128)")
    p.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray cluster (default 2)")
