"""The simulated executor: trials answered from a tabular benchmark on a simulated clock.

``workers`` simulated workers run concurrently. A submitted trial starts at once on a free worker at
the current simulated time and finishes ``seconds`` later, where ``seconds`` is what the benchmark says
its training costs; :meth:`SimulatedExecutor.poll` advances the clock to the earliest finish time in
its event queue and returns that trial. So a search of many simulated hours with hundreds of workers
takes seconds of real time, through the same loop, strategies and journal as a real run (the idea of
Syne Tune's ``SimulatorBackend`` with its simulated time keeper, and of NAS-Bench-201's replay).

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

import heapq
from typing import Any, Protocol

import numpy as np

from nas.executor import Executor
from nas.space import SearchSpace
from nas.types import Arch, Result, Trial, TrialState


class TabularBenchmark(Protocol):
    epochs: int

    def query(self, arch: Arch) -> tuple[float, float, dict[str, Any]]: ...


class UnsupportedTrial(ValueError):
    """A trial a tabular benchmark has no answer for."""


class SimulatedExecutor(Executor):
    """``workers`` simulated workers answering from ``benchmark``; ``noise``: standard deviation of
    Gaussian noise added to each reward (0: the table's value), drawn from a generator seeded with
    ``seed``. Results carry simulated ``start_time``/``end_time`` (seconds since the executor began)
    and the worker (``sim-0``, ``sim-1``, ...) that ran them."""

    def __init__(self, space: SearchSpace, benchmark: TabularBenchmark, *, workers: int = 1,
                 seed: int | None = None, noise: float = 0.0) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
        if not noise >= 0:
            raise ValueError(f"noise must be >= 0, got {noise!r}")
        self.space = space
        self.benchmark = benchmark
        self.workers = workers
        self.noise = float(noise)
        self.rng = np.random.default_rng(seed)
        self._now = 0.0
        self._queue: list[tuple[float, int, int, Trial, Result]] = []  # (finish, seq, worker, trial, result)
        self._seq = 0
        self._idle = list(range(workers))[::-1]
        self._stopped: list[tuple[Trial, Result]] = []
        self.max_in_flight = 0  # the most trials ever running at once (never above ``workers``)
        self.work = 0.0  # simulated training seconds of every trial delivered

    @property
    def slots(self) -> int:
        return self.workers

    def free_slots(self) -> int:
        return len(self._idle)

    def in_flight(self) -> int:
        return len(self._queue)

    def now(self) -> float:
        return self._now

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
        if not self._idle:
            raise RuntimeError("no free slot: submit only when free_slots() > 0")
        worker = self._idle.pop()
        start = self._now
        try:
            reward, seconds, metrics = self.benchmark.query(trial.arch)
        except (KeyError, ValueError) as e:  # not an architecture of the table: a failed trial, at no cost
            result = Result.failed(trial.trial_id, f"{type(e).__name__}: {e}")
            seconds = 0.0
        else:
            if self.noise:
                reward += float(self.rng.normal(0.0, self.noise))
            result = Result(trial.trial_id, TrialState.COMPLETE, score=reward, epoch=self.benchmark.epochs,
                            metrics={**metrics, "train_seconds": seconds})
        result.start_time, result.end_time = start, start + seconds
        result.worker, result.node = f"sim-{worker}", "simulated"
        heapq.heappush(self._queue, (start + seconds, self._seq, worker, trial, result))
        self._seq += 1
        self.max_in_flight = max(self.max_in_flight, len(self._queue))

    def poll(self, timeout: float | None = None) -> list[tuple[Trial, Result]]:
        """The next completion: the clock moves to its finish time (never backwards)."""
        if self._stopped:
            out, self._stopped = self._stopped, []
            return out
        if not self._queue:
            return []
        finish, _, worker, trial, result = heapq.heappop(self._queue)
        self._now = max(self._now, finish)
        self._idle.append(worker)
        self.work += finish - (result.start_time or 0.0)
        return [(trial, result)]

    def stop(self, trial_id: int) -> None:
        """Cancel a running trial now; it comes back from the next ``poll`` as FAILED ("stopped")."""
        for k, (_, _, worker, trial, result) in enumerate(self._queue):
            if trial.trial_id == trial_id:
                self._queue.pop(k)
                heapq.heapify(self._queue)
                self._idle.append(worker)
                start = result.start_time or 0.0
                self.work += self._now - start
                self._stopped.append((trial, Result.failed(trial_id, "stopped", start_time=start,
                                                           end_time=self._now, worker=result.worker,
                                                           node=result.node)))
                return

    def checkpoint(self, trial_id: int) -> bytes | None:
        return None  # nothing is trained, so there are no weights to keep
