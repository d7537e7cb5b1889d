"""``nas bench driver``: the driver's own cost per trial, against the number of workers and the run's length.

Simulated NAS-Bench-201 (:class:`nas.engine.simulated.SimulatedExecutor`: no training, so what is timed is the
driver), regularized evolution (P=100, S=10), the real run directory on disk (the journal fsynced per
batch of results, snapshots every K results or T seconds, status.json). For each number of workers W
(default 100, 1,000, 10,000, 20,000) a search of N = 10 x W finished trials (capped at 200,000) runs in a
subprocess, with a budget of N + W so that submissions go on through the last tenth; it is SIGKILLed
the moment its N-th result is told, and this process times the resume's loading (lock, journal, snapshot,
replay) of the killed run.

Printed per W: real ms per trial in the first and the last tenth of the run, the journal's fsync time
per trial apart, the driver's time per trial apart from fsync (real minus fsync), the strategy's ask+tell
apart, the same per trial in CPU time of the search process (what a loaded machine's wait for a core does
not inflate), peak RSS of the search process and its resident memory's growth per trial after the first tenth (what
the driver keeps per trial, as the OS sees it), with ``--heap`` the Python heap it keeps per finished trial after
the first tenth (tracemalloc, in a second run of the same search: tracing slows it, so no time is taken from that
run), the last snapshot's size, and the resume time (wall and CPU);
each per-trial figure also as a ratio to the smallest W's, measured in the same command.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from . import add_experiment
from .harness import int_list, strategy_name, text_table

CAP = 200_000
OPTIONS = {"population": 100, "sample_size": 10}


def _record(strategy: str, workers: int, budget: int) -> dict[str, Any]:
    from nas.search_spaces.nb201 import NB201Space

    return {"space": "nb201", "space_spec": NB201Space().spec(), "strategy": strategy,
            "strategy_options": OPTIONS if strategy == "evolution" else {}, "seed": 0, "budget": budget,
            "workers": workers, "dataset": "nb201-cifar10", "executor": "simulated"}


def _parts(strategy: str, workers: int) -> tuple[Any, Any]:
    from nas.api import make_strategy
    from nas.engine.simulated import SimulatedExecutor
    from nas.engine.tabular.nb201_table import NB201Benchmark
    from nas.search_spaces.nb201 import NB201Space

    space = NB201Space()
    executor = SimulatedExecutor(space, NB201Benchmark("cifar10"), workers=workers, seed=0)
    options = OPTIONS if strategy == "evolution" else {}
    return make_strategy(strategy, space, seed=0, options=options), executor


def child(run_dir: str, strategy: str, workers: int, n: int, snapshot_every: int, out: str, heap: bool = False) -> None:
    """The search, in its own process: figures to ``out`` once the N-th result is told, then wait to be killed.
    ``heap``: trace the Python heap from the first tenth on (what stays allocated per trial at the end)."""
    from nas.engine.interfaces import Callback, LoopStatus
    from nas.engine.loop import SearchLoop
    from nas.run.store import RunStore

    strat, executor = _parts(strategy, workers)
    store = RunStore.create(run_dir, _record(strategy, workers, n + workers), snapshot_every=snapshot_every)
    tenth = max(n // 10, 1)
    marks: dict[int, tuple[float, float, float, float, float]] = {}

    def rss() -> float:  # resident memory now, bytes
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * float(os.sysconf("SC_PAGE_SIZE"))

    class Marks(Callback):
        def on_start(self, status: LoopStatus) -> None:
            marks[0] = (time.perf_counter(), 0.0, 0.0, time.process_time(), rss())

        def on_result(self, status: LoopStatus, trial: Any, result: Any) -> None:
            done = status.finished
            if heap and done == tenth:
                tracemalloc.start()
            if done in (tenth, n - tenth, n):
                marks[done] = (time.perf_counter(), store.journal.fsync_seconds, status.strategy_seconds,
                               time.process_time(), rss())
            if done == n:
                figures = {"marks": {str(k): v for k, v in marks.items()}, "tenth": tenth,
                           "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                           "snapshot_bytes": store.snapshot_bytes, "snapshots": store.snapshots,
                           "fsyncs": store.journal.fsyncs,
                           "heap": tracemalloc.get_traced_memory()[0] / max(n - tenth, 1) if heap else None}
                Path(out).write_text(json.dumps(figures))
                print("READY", flush=True)
                while True:  # the parent SIGKILLs this process now: a crash at the end of the run
                    time.sleep(60)

    SearchLoop(strat, executor, budget=n + workers, store=store, callbacks=[Marks()], poll_timeout=0.0).run()


def resume_seconds(run_dir: str, strategy: str, workers: int, n: int) -> tuple[float, float, int]:
    """Time to load a killed run for resuming: the lock, run.json, the journal, the snapshot and the replay."""
    from nas.engine.loop import SearchLoop
    from nas.run.journal import bulk_load
    from nas.run.store import RunStore

    strat, executor = _parts(strategy, workers)  # (the NB201 table's loading is no part of the resume)
    t0, c0 = time.perf_counter(), time.process_time()
    store = RunStore.resume(run_dir, _record(strategy, workers, n + workers))
    assert store.restored is not None
    loop = SearchLoop(strat, executor, budget=n + workers, store=store)
    with bulk_load(freeze=True):
        loop.restore(store.restored)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    store.close()
    return seconds, cpu, loop.finished


def _search(tmp: str, strategy: str, workers: int, n: int, snapshot_every: int, heap: bool) -> dict[str, Any]:
    """Run the search in a child process until its N-th result, SIGKILL it, and read its figures."""
    run_dir, out = os.path.join(tmp, "run"), os.path.join(tmp, "figures.json")
    proc = subprocess.Popen(
        [sys.executable, "-m", "nas_benchmarks.driver", "--child", run_dir, strategy, str(workers), str(n),
         str(snapshot_every), out, str(int(heap))], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "READY":
        proc.kill()
        raise RuntimeError(f"the search process ended without finishing (exit {proc.wait()})")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return json.loads(Path(out).read_text())  # type: ignore[no-any-return]


def measure(strategy: str, workers: int, n: int, snapshot_every: int, where: str | None = None,
            heap: bool = False) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="nas-bench-driver-", dir=where) as tmp:
        fig = _search(tmp, strategy, workers, n, snapshot_every, False)
        seconds, cpu, finished = resume_seconds(os.path.join(tmp, "run"), strategy, workers, n)
    heap_per_trial = None
    if heap:
        with tempfile.TemporaryDirectory(prefix="nas-bench-driver-", dir=where) as tmp:
            heap_per_trial = _search(tmp, strategy, workers, n, snapshot_every, True)["heap"]
    marks = {int(k): v for k, v in fig["marks"].items()}
    t = fig["tenth"]

    def per_trial(a: int, b: int, i: int) -> float:
        return 1e3 * (marks[b][i] - marks[a][i]) / (b - a)

    first, last = per_trial(0, t, 0), per_trial(n - t, n, 0)
    fsync_last = per_trial(n - t, n, 1)
    return {"workers": workers, "trials": n, "first": first, "last": last, "fsync": fsync_last,
            "cpu_first": per_trial(0, t, 3), "cpu_last": per_trial(n - t, n, 3), "resume_cpu": cpu,
            "driver": last - fsync_last, "strategy": per_trial(n - t, n, 2), "rss_mb": fig["rss_mb"],
            "rss_per_trial": (marks[n][4] - marks[t][4]) / max(n - t, 1),
            "snapshot_kb": fig["snapshot_bytes"] / 1024, "snapshots": fig["snapshots"], "resume": seconds,
            "resumed": finished, "heap": heap_per_trial}


def format_rows(rows: list[dict[str, Any]]) -> str:
    base = rows[0]
    head = ["workers", "trials", "ms/trial first 10%", "last 10%", "last/first", "fsync ms", "driver ms (no fsync)",
            "strategy ms", f"x W={base['workers']}", "CPU ms first", "CPU last", f"CPU x W={base['workers']}",
            "peak RSS MB", "RSS B/trial", "heap B/trial", "snapshot KB", "snapshots", "resume s", "resume CPU s"]
    return text_table([head] + [
        [f"{r['workers']:,}", f"{r['trials']:,}", f"{r['first']:.3f}", f"{r['last']:.3f}",
         f"{r['last'] / r['first']:.2f}", f"{r['fsync']:.3f}", f"{r['driver']:.3f}", f"{r['strategy']:.3f}",
         f"{r['last'] / base['last']:.2f}", f"{r['cpu_first']:.3f}", f"{r['cpu_last']:.3f}",
         f"{r['cpu_last'] / max(base['cpu_last'], 1e-9):.2f}", f"{r['rss_mb']:.0f}", f"{r['rss_per_trial']:.0f}",
         "-" if r["heap"] is None else f"{r['heap']:.0f}", f"{r['snapshot_kb']:.0f}",
         str(r["snapshots"]), f"{r['resume']:.2f}", f"{r['resume_cpu']:.2f}"] for r in rows], rule=True)


def register(sub: argparse._SubParsersAction) -> None:
    p = add_experiment(sub, __doc__, cmd_driver)
    p.add_argument("--workers", default="100,1000,10000,20000", help="comma-separated worker counts")
    p.add_argument("--trials-per-worker", type=int, default=10, help=f"N = this x W, capped at {CAP:,} (default 10)")
    p.add_argument("--trials", type=int, help="N for every W instead (the same run length on each row: the "
                   "ratio to the smallest W is then the workers' effect alone)")
    p.add_argument("--strategy", default="evolution", help="evolution (P=100, S=10; default) or another "
                   "registered strategy, e.g. optuna (its ask+tell time is the 'strategy ms' column)")
    p.add_argument("--snapshot-every", type=int, default=1000, help="K: results between snapshots (default 1000)")
    p.add_argument("--heap", action="store_true", help="also the Python heap kept per finished trial "
                   "(tracemalloc, in a second run of each search)")
    p.add_argument("--dir", help="where the run directories go (default: the system's temporary directory); "
                   "its disk's fsync time is the 'fsync ms' column")


def cmd_driver(args: argparse.Namespace) -> int:
    strategy_name(args.strategy)
    workers = int_list(args.workers, "--workers")
    if any(w < 1 for w in workers) or args.trials_per_worker < 1 or args.snapshot_every < 1 or (
            args.trials is not None and args.trials < 10):
        raise ValueError(f"--workers, --trials-per-worker and --snapshot-every must be >= 1 and --trials >= 10, got "
                         f"{args.workers}, {args.trials_per_worker}, {args.snapshot_every}, {args.trials}")
    if args.dir is not None and not os.path.isdir(args.dir):
        raise ValueError(f"--dir must be an existing folder, got {args.dir!r}")
    rows = []
    for w in workers:
        n = min(args.trials if args.trials is not None else args.trials_per_worker * w, CAP)
        rows.append(measure(args.strategy, w, n, args.snapshot_every, args.dir, args.heap))
        print(f"W={w:,}: {rows[-1]['trials']:,} trials, resume loaded {rows[-1]['resumed']:,} in "
              f"{rows[-1]['resume']:.2f} s", flush=True)
    print(f"simulated NAS-Bench-201, {args.strategy}"
          f"{' (P=100, S=10)' if args.strategy == 'evolution' else ''}, journal and snapshots on disk "
          f"(snapshot every {args.snapshot_every} results or 60 s) in {args.dir or tempfile.gettempdir()}")
    print(format_rows(rows))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 9 and sys.argv[1] == "--child":
        _, _, run_dir, strategy, w, n, k, out, heap = sys.argv
        child(run_dir, strategy, int(w), int(n), int(k), out, heap == "1")
