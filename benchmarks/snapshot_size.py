"""Snapshot size against run length: each strategy driven on the simulated NAS-Bench-201 table (scores
looked up, no training), ``--in-flight`` trials outstanding, its snapshot written after N trials for each
N of ``--trials``; bytes (JSON + safetensors), write and read times, and the search's own time up to N (ask/tell
and journal appends; snapshots apart) are printed, never asserted. A size
that stays flat as N grows is the point: a snapshot must be O(population), not O(trials).

    python -m nas_benchmarks.snapshot_size --strategies random,evolution,pbt --trials 10000,100000
    python -m nas_benchmarks.snapshot_size --strategies optuna --options sampler=random --trials 1000,5000 --journal

>>> rows = measure("evolution", {"population": 10, "sample_size": 3}, [50, 100], in_flight=4)
>>> [r["trials"] for r in rows], rows[0]["bytes"] > 0
([50, 100], True)
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from nas.api import make_strategy
from nas.core.types import Result, TrialState
from nas.engine.tabular.nb201 import NB201Benchmark
from nas.run.snapshot import read_snapshot, write_snapshot
from nas.search_spaces.nb201 import NB201Space


def measure(name: str, options: dict[str, Any], marks: Sequence[int], *, in_flight: int = 100,
            journal: bool = False, seed: int = 0) -> list[dict[str, Any]]:
    """One row per mark: the snapshot's bytes (and the optuna journal's, with ``journal``) after that many
    trials, and the time to write and read it."""
    bench, space, rows = NB201Benchmark("cifar10"), NB201Space(), []
    with tempfile.TemporaryDirectory() as tmp:
        d = pathlib.Path(tmp)
        opts = {**options, **({"storage": str(d / "optuna.journal")} if journal else {})}
        strategy = make_strategy(name, space, seed=seed, options=opts)
        pending: list = []
        told, start = 0, time.perf_counter()
        for mark in sorted(marks):
            while told < mark:
                while len(pending) < in_flight and (t := strategy.ask()) is not None:
                    pending.append(t)
                t = pending.pop(0)
                strategy.tell(t, Result(t.trial_id, TrialState.COMPLETE, score=bench.query(t.arch)[0], epoch=1))
                told += 1
            t0 = time.perf_counter()
            drive_s = t0 - start
            size = write_snapshot(d / "strategy.json", strategy.state_dict())
            t1 = time.perf_counter()
            read_snapshot(d / "strategy.json")
            t2 = time.perf_counter()
            side = d / "optuna.journal"
            rows.append({"strategy": name, "options": options, "trials": mark, "bytes": size,
                         "journal_bytes": side.stat().st_size if side.exists() else None,
                         "write_ms": (t1 - t0) * 1e3, "read_ms": (t2 - t1) * 1e3, "drive_s": drive_s})
            start += t2 - t0  # snapshot time apart from the search's
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nas_benchmarks.snapshot_size", description=__doc__.split("\n\n")[0])
    p.add_argument("--strategies", default="random,evolution,pbt,rl")
    p.add_argument("--options", default="", help="key=value[,key=value] (values parsed as JSON where they parse)")
    p.add_argument("--trials", default="10000,100000")
    p.add_argument("--in-flight", type=int, default=100)
    p.add_argument("--journal", action="store_true", help="optuna: keep the study in a journal storage")
    args = p.parse_args(argv)
    options: dict[str, Any] = {}
    for item in filter(None, args.options.split(",")):
        key, _, value = item.partition("=")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    marks = [int(x) for x in args.trials.split(",")]
    print(f"{'strategy':10s} {'options':28s} {'trials':>8s} {'snapshot B':>11s} {'journal B':>11s} "
          f"{'write ms':>9s} {'read ms':>8s} {'search s':>9s}")
    for name in args.strategies.split(","):
        for r in measure(name, options, marks, in_flight=args.in_flight, journal=args.journal):
            jb = "-" if r["journal_bytes"] is None else f"{r['journal_bytes']:,}"
            print(f"{name:10s} {args.options or '-':28s} {r['trials']:>8,} {r['bytes']:>11,} {jb:>11s} "
                  f"{r['write_ms']:9.1f} {r['read_ms']:8.1f} {r['drive_s']:9.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
