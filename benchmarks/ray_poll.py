"""``nas bench ray-poll``: the driver's cost per trial against the number of trials in flight, on light actors.

W light trainer actors (``--cpus-per-actor`` CPUs each, default 0.03, so 64 fit on two cores; their
trainer, :class:`NoopTrainer`, answers at once and never loads torch) run N trivial trials, each worker
holding one trial queued behind the one it runs, so 2 x W trials are in flight. Side by side on the same cluster:

- ours: :class:`nas.engine.ray_pool.RayExecutor` driven as the loop drives it (submit while a slot is free,
  then ``poll``). Each actor has one stream for its life; a trial is handed over by a plain actor call with one
  argument of bytes; ``poll`` reads a queue that Ray's callbacks on the trials' calls and the actors' streams fill:
  it touches only what has news.
- baseline: the same light actors driven by the usual pattern, ``ray.wait`` over the references of
  every trial in flight (then a second ``ray.wait`` with ``num_returns=len(rest), timeout=0`` to batch
  what is also done): O(in flight) per call.
- Ray's floor for our way (``--floor``): light actors with what ours needs of Ray and nothing of ours: the
  trainer actor's concurrency groups (a trial's call blocks a thread while ``decide`` and ``info`` stay
  answerable), one idle streaming generator per actor, a call with one bytes argument per trial whose return
  comes to an ``ObjectRef._on_completed`` callback that puts it in a queue, which the poll drains. Ours over the
  floor (``x floor``) is what our own code adds; the floor over the baseline is what Ray charges for the
  mechanism.

It prints, per row, the driver process's CPU time (``time.process_time``: all its threads, Ray's
callback threads included; the waiting is not counted) per trial in poll (ours) or wait+get (baseline)
and in submit, their sum (with ``--repeats N``: of the side's median run, and each run's sum beside it), ours (and the
floor) over the baseline's at the same number in flight (``x baseline``), ours over the floor's, each side over
its own first row (``x first row``: how the cost grows with the number in flight), the wall time per trial, and
the resident memory the driver gained per finished trial after the first tenth (what it retains per trial), and
for ours the items its actors' streams sent per trial (a trivial trial's end comes back with its call: none). The
actors' start-up is shown apart (it is not in the per-trial figures), with each side's mean resident and unique
memory per actor (RSS, USS) and the memory the machine had available once they were up (what decides how many light
actors fit).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

from nas.core.types import Trial

from . import add_experiment
from .harness import int_list, text_table

BASELINE, FLOOR = "ray.wait over all", "Ray's floor"


def rss() -> int:
    """This process's resident memory now, bytes (what it retains, unlike the peak)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def actor_memory(pids: list[int]) -> dict[str, float]:
    """The actors' mean resident and unique memory (bytes) and what the machine has available now."""
    import psutil

    rss, uss = [], []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            info = psutil.Process(pid).memory_full_info()
            rss.append(info.rss)
            uss.append(info.uss)
    return {"actor_rss": sum(rss) / max(len(rss), 1), "actor_uss": sum(uss) / max(len(uss), 1),
            "available": psutil.virtual_memory().available}


def drive(trials: int, submit: Callable[[int], bool], in_flight: Callable[[], int],
          poll: Callable[[], int]) -> dict[str, Any]:
    """Until ``trials`` are done: ``submit(trial_id)`` while it takes one (False: no free slot), then ``poll()`` (the
    trials it saw end). The driver's CPU time in each, apart; the wall time; the most trials in flight; the resident
    memory it gained per finished trial after the first tenth (what it retains per trial)."""
    submitted = done = most = 0
    poll_cpu = submit_cpu = 0.0
    tenth, rss_tenth, done_tenth = max(trials // 10, 1), -1, 0
    t1 = time.perf_counter()
    while done < trials:
        c = time.process_time()
        while submitted < trials and submit(submitted):
            submitted += 1
        submit_cpu += time.process_time() - c
        most = max(most, in_flight())
        c = time.process_time()
        done += poll()
        poll_cpu += time.process_time() - c
        if rss_tenth < 0 and done >= tenth:
            rss_tenth, done_tenth = rss(), done
    retained = (rss() - rss_tenth) / max(trials - done_tenth, 1)
    return {"in_flight": most, "trials": trials, "wall": time.perf_counter() - t1, "poll_cpu": poll_cpu,
            "submit_cpu": submit_cpu, "rss_per_trial": retained}


def ours(trials: int, workers: int, cpus: float, prefetch: bool) -> dict[str, Any]:
    """N trials through our RayExecutor on W light actors (Ray must be initialised)."""
    import ray

    from nas.engine.protocol import KeepRule
    from nas.engine.ray_pool import RayExecutor
    from nas.train.simple import noop

    KEEP = KeepRule()
    t0 = time.perf_counter()
    ex = RayExecutor(None, None, None, workers=workers, train=noop, cpus_per_trial=cpus,
                     prefetch=prefetch, name_prefix=f"nas-light-{workers}-{int(prefetch)}-{os.getpid()}",
                     start_timeout=900.0)  # many actors on a small, busy machine start slowly
    start_up = time.perf_counter() - t0
    memory = actor_memory([info["pid"] for info in ray.get([ex.actor(i).info.remote() for i in range(workers)])])

    def submit(trial_id: int) -> bool:
        if ex.free_slots() <= 0:
            return False
        ex.submit(Trial(trial_id, {"x": 0}), keep=KEEP)
        return True

    try:
        figures = drive(trials, submit, ex.in_flight,
                        lambda: sum(e.result is not None and e.result.ok for e in ex.poll(timeout=30.0)))
    finally:
        ex.shutdown()
    return {"side": "ours", "workers": workers, "start_up": start_up, "items": ex.stream_items / trials, **memory,
            **figures}


def light_side(side: str, trials: int, workers: int, prefetch: bool, start: Callable[[], tuple[list[Any], list[int]]],
               send: Callable[[Any, int], Any], ended: Callable[[dict[Any, int]], list[Any]]) -> dict[str, Any]:
    """N trials on W light actors with none of our code: ``start()`` makes the actors (and gives their pids; timed
    apart), ``send(actor, trial_id)`` makes a trial's call and gives the key it is known by until it ends,
    ``ended(running)`` waits for some of the keys in flight to end and gives them. Each actor holds one trial, or one
    queued behind it where ``prefetch``; they are killed at the end."""
    import ray

    t0 = time.perf_counter()
    actors, pids = start()
    start_up = time.perf_counter() - t0
    memory = actor_memory(pids)
    free = [i for _ in range(2 if prefetch else 1) for i in range(workers)][::-1]
    running: dict[Any, int] = {}  # a trial's key -> its actor's slot

    def submit(trial_id: int) -> bool:
        if not free:
            return False
        slot = free.pop()
        running[send(actors[slot], trial_id)] = slot
        return True

    def poll() -> int:
        keys = ended(running)
        for key in keys:
            free.append(running.pop(key))
        return len(keys)

    try:
        figures = drive(trials, submit, lambda: len(running), poll)
    finally:
        for a in actors:
            ray.kill(a)
    return {"side": side, "workers": workers, "start_up": start_up, **memory, **figures}


def baseline(trials: int, workers: int, cpus: float, prefetch: bool) -> dict[str, Any]:
    """N trials on W light actors, polled with ``ray.wait`` over every reference in flight."""
    import ray

    @ray.remote
    class Light:
        def run(self, trial_id: int) -> tuple[int, float]:
            return trial_id, time.time()

        def pid(self) -> int:
            return os.getpid()

    def start() -> tuple[list[Any], list[int]]:
        actors = [Light.options(num_cpus=cpus).remote() for _ in range(workers)]  # type: ignore[attr-defined]
        return actors, ray.get([a.pid.remote() for a in actors])

    def ended(running: dict[Any, int]) -> list[Any]:
        ready, rest = ray.wait(list(running), num_returns=1, timeout=30.0)
        if ready and rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        for ref in ready:
            ray.get(ref)
        return ready

    return light_side(BASELINE, trials, workers, prefetch, start, lambda actor, trial_id: actor.run.remote(trial_id),
                      ended)


def floor(trials: int, workers: int, cpus: float, prefetch: bool) -> dict[str, Any]:
    """N trials on W light actors built as ours are (concurrency groups, one idle stream each, a bytes argument,
    a completion callback into a queue), with none of our code: what Ray charges for our way of calling."""
    import queue

    import ray

    @ray.remote(concurrency_groups={"monitor": 1, "trials": 4})  # type: ignore[call-overload]  # (as TrainerActor)
    class Grouped:
        def __init__(self) -> None:
            import threading

            self.closed = threading.Event()

        @ray.method(concurrency_group="trials")
        def take(self, handed: bytes) -> bytes:
            return handed

        def stream(self) -> Any:  # (idle, as a trainer actor's stream is for trivial trials)
            self.closed.wait()
            yield b""

        @ray.method(concurrency_group="monitor")
        def pid(self) -> int:
            return os.getpid()

    streams: list[Any] = []  # (each actor's stream, kept open until its actor is killed)
    inbox: queue.SimpleQueue[int] = queue.SimpleQueue()
    handed = bytes(64)  # (about what hand_over makes of a small trial)

    def start() -> tuple[list[Any], list[int]]:
        actors = [Grouped.options(num_cpus=cpus, max_concurrency=1).remote() for _ in range(workers)]  # type: ignore[attr-defined]
        streams.extend(a.stream.options(num_returns="streaming").remote() for a in actors)
        return actors, ray.get([a.pid.remote() for a in actors])

    def send(actor: Any, trial_id: int) -> int:
        actor.take.remote(handed)._on_completed(lambda _: inbox.put(trial_id))
        return trial_id

    def ended(running: dict[Any, int]) -> list[Any]:
        news = [inbox.get(timeout=30.0)]
        with contextlib.suppress(queue.Empty):
            while True:
                news.append(inbox.get_nowait())
        return news

    return light_side(FLOOR, trials, workers, prefetch, start, send, ended)


def format_rows(rows: list[dict[str, Any]]) -> str:
    head = ["side", "actors", "in flight", "trials", "poll CPU us/trial", "submit CPU us/trial", "CPU us/trial",
            "runs (CPU us/trial)", "x baseline", "x floor", "x first row", "wall ms/trial", "RSS B/trial",
            "stream items/trial", "start-up (s)", "actor RSS/USS MB", "available GB"]
    out = [head]
    first = {side: next(r for r in rows if r["side"] == side) for side in {r["side"] for r in rows}}

    def cpu(r: dict[str, Any]) -> float:
        return (r["poll_cpu"] + r["submit_cpu"]) / r["trials"]

    def spread(r: dict[str, Any]) -> str:
        """The CPU per trial of each run of the row's side, where it ran more than once."""
        runs = r.get("cpu_runs", [])
        return ",".join(f"{1e6 * c:.0f}" for c in runs) if len(runs) > 1 else ""

    def over(r: dict[str, Any], side: str) -> str:
        """``r``'s CPU per trial over ``side``'s at the same number in flight."""
        base = next((b for b in rows if b["side"] == side and b["in_flight"] == r["in_flight"]), None)
        return "" if base is None or r is base else f"{cpu(r) / max(cpu(base), 1e-12):.2f}x"

    for r in rows:
        out.append([r["side"], str(r["workers"]), str(r["in_flight"]), str(r["trials"]),
                    f"{1e6 * r['poll_cpu'] / r['trials']:.0f}", f"{1e6 * r['submit_cpu'] / r['trials']:.0f}",
                    f"{1e6 * cpu(r):.0f}", spread(r), over(r, BASELINE), over(r, FLOOR) if r["side"] == "ours" else "",
                    f"{cpu(r) / max(cpu(first[r['side']]), 1e-12):.2f}x",
                    f"{1e3 * r['wall'] / r['trials']:.3f}", f"{r['rss_per_trial']:.0f}",
                    f"{r['items']:.2f}" if "items" in r else "", f"{r['start_up']:.1f}",
                    f"{r['actor_rss'] / 2**20:.0f}/{r['actor_uss'] / 2**20:.0f}", f"{r['available'] / 2**30:.1f}"])
    return text_table(out, rule=True)


def run(trials: int, workers: list[int], cpus: float, *, baseline_too: bool = True, floor_too: bool = False,
        repeats: int = 1) -> list[dict[str, Any]]:
    """A row per side and pool size; with ``repeats`` > 1 the sides run that many times, interleaved (each round
    starts with the next side, so a machine getting busier weighs on each alike), and each row is the side's median
    run by CPU per trial, with the range of all its runs."""
    sides = [ours] + [floor] * floor_too + [baseline] * baseline_too
    rows = []
    for w in workers:  # each worker holds a running trial and a queued one: 2 x W in flight
        runs: dict[Callable[..., dict[str, Any]], list[dict[str, Any]]] = {side: [] for side in sides}
        for k in range(repeats):
            for side in sides[k % len(sides):] + sides[:k % len(sides)]:
                runs[side].append(side(trials, w, cpus, True))
        for side in sides:
            done = sorted(runs[side], key=lambda r: r["poll_cpu"] + r["submit_cpu"])
            row = done[(len(done) - 1) // 2]
            row["cpu_runs"] = [(r["poll_cpu"] + r["submit_cpu"]) / trials for r in done]
            rows.append(row)
    return rows


def register(sub: argparse._SubParsersAction) -> None:
    p = add_experiment(sub, __doc__, cmd_ray_poll)
    p.add_argument("--trials", type=int, default=10_000, help="trials per measurement (default 10,000)")
    p.add_argument("--workers", default="16,64", help="light actors, comma-separated (default 16,64)")
    p.add_argument("--cpus-per-actor", type=float, default=0.03, help="CPUs per light actor (default 0.03)")
    p.add_argument("--no-baseline", action="store_true", help="skip the ray.wait-over-all baseline")
    p.add_argument("--floor", action="store_true",
                   help="also run Ray's floor for our way of calling (actors as ours, none of our code)")
    p.add_argument("--repeats", type=int, default=1,
                   help="runs of each side per pool size, interleaved; a row is the median run (default 1)")
    p.add_argument("--address", help="Ray cluster to join (default: start a local one)")


def cmd_ray_poll(args: argparse.Namespace) -> int:
    workers = int_list(args.workers, "--workers")
    if args.trials < 1 or args.repeats < 1 or any(w < 1 for w in workers) or not 0 < args.cpus_per_actor <= 1:
        raise ValueError(f"--trials, --repeats and --workers must be >= 1 and --cpus-per-actor in (0, 1], got "
                         f"{args.trials}, {args.repeats}, {args.workers}, {args.cpus_per_actor}")
    from nas.api import connect

    connect(args.address, num_cpus=os.cpu_count() or 1)
    print(f"{args.trials} trivial trials per row on light actors ({args.cpus_per_actor:g} CPU each); "
          f"driver process CPU time per trial (all threads; waiting excluded)", flush=True)
    rows: list[dict[str, Any]] = []
    for w in workers:  # the table so far after each pool size: a slow start of the next one loses nothing
        rows += run(args.trials, [w], args.cpus_per_actor, baseline_too=not args.no_baseline,
                    floor_too=args.floor, repeats=args.repeats)
        print(format_rows(rows), flush=True)
    return 0
