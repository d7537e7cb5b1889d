"""The simulated executor: trials answered from a tabular benchmark on a simulated clock.

``workers`` simulated workers run concurrently. A submitted trial starts at once on a free worker at
the current simulated time and finishes ``seconds`` later, where ``seconds`` is what the benchmark says
its training costs; :meth:`SimulatedExecutor.poll` advances the clock to the earliest finish time in
its event queue and returns that trial. So a search of many simulated hours with hundreds of workers
takes seconds of real time, through the same loop, strategies and journal as a real run (the idea of
Syne Tune's ``SimulatorBackend`` with its simulated time keeper, and of NAS-Bench-201's replay).

The driver's round trip is modelled too (``round_trip`` simulated seconds: a result travels to the
driver, is journaled and told, the next trial travels back): a trial sent to an idle worker starts
``round_trip`` after it was submitted, and the executor prefetches (queues a trial behind a running
one, which starts the moment its predecessor ends) by the same measured rule as the Ray executor,
:class:`nas.engine.executor.PrefetchRule`: only while the median trial is short against the round
trip. So simulated benchmarks see the same idle time, and the same staleness, as a real run.

A benchmark is any object with ``query(arch) -> (reward, seconds, metrics)`` and an ``epochs``
attribute, e.g. :class:`nas.bench.nb201data.NB201Benchmark`. Trials the table cannot answer (other
hyperparameters, another epoch count, a checkpoint to start from) raise :class:`UnsupportedTrial`
at ``submit``: a simulated answer to them would be made up.

>>> from nas.bench.nb201data import NB201Benchmark
>>> from nas.search_spaces.nb201 import NB201Space
>>> from nas.strategies.random import RandomSearch
>>> from nas.loop import SearchLoop
>>> space = NB201Space()
>>> ex = SimulatedExecutor(space, NB201Benchmark("cifar10"), workers=8)
>>> loop = SearchLoop(RandomSearch(space, seed=0), ex, time_budget=12_000)
>>> results = loop.run()
>>> ex.now() >= 12_000, ex.max_in_flight, len(results) > 8 * 12_000 / 210
(True, 8, True)
"""

from __future__ import annotations

import collections
import heapq
from typing import Any, Protocol

import numpy as np

from nas.engine.executor import Event, EventKind, ExecutorConfig, PrefetchRule
from nas.executor import BaseExecutor
from nas.registry import register_executor
from nas.space import SearchSpace
from nas.types import Arch, Result, Trial, TrialState


class TabularBenchmark(Protocol):
    epochs: int

    def query(self, arch: Arch) -> tuple[float, float, dict[str, Any]]: ...


class UnsupportedTrial(ValueError):
    """A trial a tabular benchmark has no answer for."""


_Job = tuple[Trial, Result, float]  # the trial, its answer, its simulated seconds


@register_executor("simulated")
class SimulatedExecutor(BaseExecutor):
    """``workers`` simulated workers answering from ``benchmark``; ``noise``: standard deviation of
    Gaussian noise added to each reward (0: the table's value), drawn from a generator seeded with
    ``seed``. Results carry simulated ``start_time``/``end_time`` (seconds since the executor began)
    and the worker (``sim-0``, ``sim-1``, ...) that ran them. ``round_trip``: simulated seconds from a
    result leaving its worker to the next trial arriving there (0: none); ``prefetch``: "auto" (the
    measured rule of :class:`nas.engine.executor.PrefetchRule`, with ``round_trip`` as the round
    trip), True or False."""

    def __init__(self, space: SearchSpace, benchmark: TabularBenchmark, *, workers: int = 1,
                 seed: int | None = None, noise: float = 0.0, round_trip: float = 0.0,
                 prefetch: bool | str = "auto") -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
        if not noise >= 0:
            raise ValueError(f"noise must be >= 0, got {noise!r}")
        if not round_trip >= 0:
            raise ValueError(f"round_trip must be >= 0 simulated seconds, got {round_trip!r}")
        self.space = space
        self.benchmark = benchmark
        self.workers = workers
        self.noise = float(noise)
        self.round_trip = float(round_trip)
        self.prefetch = PrefetchRule(prefetch)
        self.prefetch.observe_round_trip(self.round_trip)
        self.rng = np.random.default_rng(seed)
        self._now = 0.0
        self._events: list[tuple[float, int, EventKind, int, Trial]] = []  # (time, seq, kind, worker, trial)
        self._seq = 0
        self._jobs: dict[int, tuple[int, Trial, Result, float]] = {}  # trial id -> (worker, ...): sent
        self._queued: list[collections.deque[_Job]] = [collections.deque() for _ in range(workers)]
        self._load = [0] * workers  # trials each worker holds: the one sent or running, and those queued
        self._free: list[dict[int, None]] = [dict.fromkeys(range(workers)[::-1]), {}]  # by load 0 / 1
        self._stopped: list[Event] = []
        self._running = 0
        self._held = 0  # trials sent, running or queued
        self._n_queued = 0
        self.max_in_flight = 0  # the most trials ever running at once (never above ``workers``)
        self.max_queued = 0  # the most trials ever held at workers beyond those running (prefetch)
        self.work = 0.0  # simulated training seconds of every trial delivered

    @classmethod
    def from_config(cls, cfg: ExecutorConfig) -> SimulatedExecutor:
        opts = cfg.checked_options("simulated", "benchmark", "noise", "round_trip", "prefetch")
        bench = opts.pop("benchmark", "cifar10")
        if isinstance(bench, str):
            from nas.bench.nb201data import NB201Benchmark

            bench = NB201Benchmark(bench)
        return cls(cfg.space, bench, workers=cfg.workers, seed=cfg.seed, **opts)

    @property
    def slots(self) -> int:
        return self.workers

    def free_slots(self) -> int:
        return len(self._free[0]) + (len(self._free[1]) if self.prefetch.on else 0)

    def in_flight(self) -> int:
        return self._held

    def now(self) -> float:
        return self._now

    def _answer(self, trial: Trial) -> _Job:
        try:
            reward, seconds, metrics = self.benchmark.query(trial.arch)
        except (KeyError, ValueError) as e:  # not an architecture of the table: a failed trial, at no cost
            return trial, Result.failed(trial.trial_id, f"{type(e).__name__}: {e}"), 0.0
        if self.noise:
            reward += float(self.rng.normal(0.0, self.noise))
        return trial, Result(trial.trial_id, TrialState.COMPLETE, score=reward, epoch=self.benchmark.epochs,
                             metrics={**metrics, "train_seconds": seconds}), seconds

    def submit(self, trial: Trial) -> None:
        asks = [f"hparams={dict(trial.hparams)}"] if trial.hparams else []
        if trial.epochs not in (None, self.benchmark.epochs):
            asks.append(f"epochs={trial.epochs}")
        if trial.checkpoint_from is not None:
            asks.append(f"checkpoint_from={trial.checkpoint_from}")
        if asks:
            raise UnsupportedTrial(
                f"trial {trial.trial_id} asks for {', '.join(asks)}; the tabular benchmark answers only "
                f"{self.benchmark.epochs}-epoch training from scratch with fixed hyperparameters"
            )
        if self._free[0]:
            worker = self._free[0].popitem()[0]
        elif self.prefetch.on and self._free[1]:
            worker = self._free[1].popitem()[0]
        else:
            raise RuntimeError("no free slot: submit only when free_slots() > 0")
        job = self._answer(trial)
        self._set_load(worker, self._load[worker] + 1)
        self._held += 1
        if self._load[worker] == 1:
            self._send(worker, job, self._now + self.round_trip)
        else:  # prefetched: it starts the moment the running trial ends
            self._queued[worker].append(job)
            self._n_queued += 1
            self.max_queued = max(self.max_queued, self._n_queued)

    def _set_load(self, worker: int, load: int) -> None:
        old, self._load[worker] = self._load[worker], load
        if old < 2:
            self._free[old].pop(worker, None)
        if load < 2:
            self._free[load][worker] = None

    def _send(self, worker: int, job: _Job, start: float) -> None:
        trial, result, seconds = job
        result.start_time, result.end_time = start, start + seconds
        result.worker, result.node = f"sim-{worker}", "simulated"
        self._jobs[trial.trial_id] = (worker, trial, result, seconds)
        self._push(start, EventKind.STARTED, worker, trial)
        self._push(start + seconds, EventKind.FINISHED, worker, trial)

    def _push(self, when: float, kind: EventKind, worker: int, trial: Trial) -> None:
        heapq.heappush(self._events, (when, self._seq, kind, worker, trial))
        self._seq += 1

    def _release(self, worker: int) -> None:
        """``worker`` is done with its trial: the next one queued there starts now."""
        self._set_load(worker, self._load[worker] - 1)
        self._held -= 1
        if self._queued[worker]:
            self._n_queued -= 1
            self._send(worker, self._queued[worker].popleft(), self._now)

    def poll(self, timeout: float | None = None) -> list[Event]:
        """Events in time order up to and including the next completion: the clock moves to its
        finish time (never backwards)."""
        if self._stopped:
            stopped, self._stopped = self._stopped, []
            return stopped
        out: list[Event] = []
        while self._events:
            when, _, kind, worker, trial = heapq.heappop(self._events)
            self._now = max(self._now, when)
            if kind is EventKind.STARTED:
                self._running += 1
                self.max_in_flight = max(self.max_in_flight, self._running)
                out.append(Event.started(trial, time=when, worker=f"sim-{worker}"))
                continue
            _, _, result, seconds = self._jobs.pop(trial.trial_id)
            self._running -= 1
            self.work += seconds
            self.prefetch.observe_duration(seconds)
            self._release(worker)
            out.append(Event.finished(trial, result))
            break
        return out

    def stop(self, trial_id: int) -> None:
        """Cancel a trial now (sent, running or queued); it comes back from the next ``poll`` as FAILED
        ("stopped")."""
        for worker, queue in enumerate(self._queued):
            for job in queue:
                if job[0].trial_id == trial_id:
                    queue.remove(job)
                    self._n_queued -= 1
                    self._held -= 1
                    self._set_load(worker, self._load[worker] - 1)
                    self._stopped.append(Event.finished(job[0], Result.failed(trial_id, "stopped")))
                    return
        if trial_id not in self._jobs:
            return
        worker, trial, result, _ = self._jobs.pop(trial_id)
        pending = {kind for _, _, kind, _, t in self._events if t.trial_id == trial_id}
        self._events = [e for e in self._events if e[4].trial_id != trial_id]
        heapq.heapify(self._events)
        start = result.start_time or 0.0
        if EventKind.STARTED not in pending:  # it was running
            self._running -= 1
            self.work += self._now - start
        self._release(worker)
        self._stopped.append(Event.finished(trial, Result.failed(
            trial_id, "stopped", start_time=min(start, self._now), end_time=self._now, worker=result.worker,
            node=result.node)))

    def checkpoint(self, trial_id: int) -> bytes | None:
        return None  # nothing is trained, so there are no weights to keep
