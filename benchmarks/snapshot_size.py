"""``nas bench snapshot-size``: a strategy's snapshot size, write and read time against the run's length.

Each strategy searches the NAS-Bench-201 cells through the real loop on the in-process executor with ``--in-flight``
trials outstanding, each scored at once by its 12-epoch accuracy in the table (:func:`.harness.scoring_executor`: no
training; unlike the simulated executor it also runs PBT's trials, whose hyperparameters and checkpoints the table
cannot answer, so their scores ignore them); its snapshot (``state_dict()`` through
:func:`nas.run.snapshot.write_snapshot`: JSON + safetensors) is written after N finished trials for each N of
``--trials``. Bytes, write and read times, and the search's own time up to N (the loop, the strategy and the
executor; snapshots apart) are printed, never asserted. A size that stays flat as N grows is the point: a
snapshot must be O(population), not O(trials).

>>> rows = measure("evolution", {"population": 10, "sample_size": 3}, [50, 100], in_flight=4)
>>> [r["trials"] for r in rows], rows[0]["bytes"] > 0
([50, 100], True)
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from nas.engine.interfaces import Callback, LoopStatus
from nas.engine.loop import SearchLoop
from nas.run.snapshot import read_snapshot, write_snapshot

from . import add_experiment
from .harness import at_least, int_list, scoring_executor, strategy_names, text_table


class _Snapshots(Callback):
    """Writes and reads the strategy's snapshot in ``where`` when the N-th result of each mark is told."""

    def __init__(self, name: str, options: dict[str, Any], marks: Sequence[int], where: pathlib.Path,
                 strategy: Any) -> None:
        self.name, self.options, self.marks, self.where = name, options, set(marks), where
        self.strategy = strategy  # (a callback gets the loop's status, not the loop: it is handed the strategy)
        self.rows: list[dict[str, Any]] = []
        self.start, self.apart, self.told = 0.0, 0.0, 0

    def on_start(self, status: LoopStatus) -> None:
        self.start = time.perf_counter()

    def on_result(self, status: LoopStatus, trial: Any, result: Any) -> None:
        self.told += 1
        if self.told not in self.marks:
            return
        t0 = time.perf_counter()
        size = write_snapshot(self.where / "strategy.json", self.strategy.state_dict())
        t1 = time.perf_counter()
        read_snapshot(self.where / "strategy.json")
        t2 = time.perf_counter()
        side = self.where / "optuna.journal"
        self.rows.append({"strategy": self.name, "options": self.options, "trials": self.told, "bytes": size,
                          "journal_bytes": side.stat().st_size if side.exists() else None,
                          "write_ms": (t1 - t0) * 1e3, "read_ms": (t2 - t1) * 1e3,
                          "drive_s": t0 - self.start - self.apart})
        self.apart += t2 - t0  # snapshot time apart from the search's


def measure(name: str, options: dict[str, Any], marks: Sequence[int], *, in_flight: int = 100,
            journal: bool = False, seed: int = 0) -> list[dict[str, Any]]:
    """One row per mark: the snapshot's bytes (and the optuna journal's, with ``journal``) after that many
    trials, and the time to write and read it."""
    from nas.api import make_strategy
    from nas.engine.tabular.nb201_table import NB201Benchmark
    from nas.search_spaces.nb201 import NB201Space

    space, bench = NB201Space(), NB201Benchmark("cifar10")
    with tempfile.TemporaryDirectory() as tmp:
        where = pathlib.Path(tmp)
        opts = {**options, **({"storage": str(where / "optuna.journal")} if journal else {})}
        strategy = make_strategy(name, space, seed=seed, options=opts)
        snapshots = _Snapshots(name, options, marks, where, strategy)
        executor = scoring_executor(space, lambda arch: bench.query(arch)[0], slots=in_flight)
        SearchLoop(strategy, executor, budget=max(marks), callbacks=[snapshots]).run()
    return snapshots.rows


def register(sub: argparse._SubParsersAction) -> None:
    p = add_experiment(sub, __doc__, cmd_snapshot_size)
    p.add_argument("--strategies", default="random,evolution,pbt,rl",
                   help="comma-separated registered strategies (default random,evolution,pbt,rl)")
    p.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a strategy option for every strategy, e.g. -o sampler=random (repeatable)")
    p.add_argument("--trials", default="10000,100000", help="the marks N, comma-separated (default 10000,100000)")
    p.add_argument("--in-flight", type=int, default=100, help="simulated workers: trials outstanding (default 100)")
    p.add_argument("--journal", action="store_true", help="optuna: keep the study in a journal storage")


def cmd_snapshot_size(args: argparse.Namespace) -> int:
    from nas.cli import parse_options

    marks = int_list(args.trials, "--trials")
    at_least(1, in_flight=args.in_flight, trials=min(marks))
    options = parse_options(args.option)
    rows = [["strategy", "options", "trials", "snapshot B", "journal B", "write ms", "read ms", "search s"]]
    for name in strategy_names(args.strategies):
        for r in measure(name, options, marks, in_flight=args.in_flight, journal=args.journal):
            rows.append([name, ",".join(args.option) or "-", f"{r['trials']:,}", f"{r['bytes']:,}",
                         "-" if r["journal_bytes"] is None else f"{r['journal_bytes']:,}", f"{r['write_ms']:.1f}",
                         f"{r['read_ms']:.1f}", f"{r['drive_s']:.1f}"])
            print(f"  {name}: {r['trials']:,} trials, {r['bytes']:,} B", file=sys.stderr, flush=True)
    print(text_table(rows, rule=True))
    return 0
