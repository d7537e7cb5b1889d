"""The simulated executor: trials answered from a tabular benchmark on a simulated clock.

``workers`` simulated workers run concurrently. A submitted trial starts at once on a free worker at
the current simulated time and finishes ``seconds`` later, where ``seconds`` is what the benchmark says
its training costs; :meth:`SimulatedExecutor.poll` advances the clock to the earliest event in its queue
(Syne Tune's ``SimulatorBackend`` with its simulated time keeper, and NAS-Bench-201's replay).

The driver's round trip is modelled too (``round_trip`` simulated seconds): a trial sent to an idle worker
starts ``round_trip`` after it was submitted, and the executor prefetches by the same measured rule as the
Ray executor (:class:`nas.engine.protocol.PrefetchRule`).

A benchmark is any object with ``query(arch) -> (reward, seconds, metrics)`` and an ``epochs`` attribute;
the reward is reported as the metric ``val_acc`` (plus Gaussian ``noise``), and ``objectives``
(:class:`nas.core.objectives.Objectives`) turn the metrics into the scores. One that also has
``fidelities`` (epoch counts it answers, e.g. 12 and 200) and ``query_epochs(arch, epochs)``, as
:class:`nas.engine.tabular.nb201_table.NB201Fidelities`, answers intermediate reports: a trial of ``epochs`` e
reports at each fidelity below e that is one of its ``wait_epochs`` (a scheduler's rungs, given with the trial),
waits there for the loop's answer (:meth:`stop` with STOPPED or PAUSED ends it at the report's time, with that
report's metrics as its result), and reports at e when it finishes. Every
stage is charged its FULL time from scratch: the table's schedules are separate trainings (the 12-epoch
run of NAS-Bench-201 does not continue into the 200-epoch one, whose learning rate schedule differs), so
a cell trained to 200 epochs through a rung at 12 costs 1.06 x its 200-epoch time. A promotion (the same
trial id submitted again with ``checkpoint_from`` = its id and ``epochs`` = the epochs still to go) of a
trial that paused or finished here runs the longer schedule likewise, charged its full time. Trials a
table cannot answer (other hyperparameters, another epoch count, another trial's checkpoint) raise
:class:`UnsupportedTrial` at ``submit``: a simulated answer to them would be made up.

``constraints`` (:class:`nas.train.constraints.Constraints`: ``--max-params``, ``--max-flops``, ``--max-latency-ms``)
are checked on the costs the table reports with the trial's first answer, as a worker checks what it measured: a
candidate over a limit is an INFEASIBLE failure at no cost, never a result. A limit on a cost the table does not
report is refused at construction (its check would pass every candidate).

>>> from nas.engine.tabular.nb201_table import NB201Benchmark
>>> from nas.search_spaces.nb201 import NB201Space
>>> from nas.strategies.random import RandomSearch
>>> from nas.engine.loop import SearchLoop
>>> space = NB201Space()
>>> ex = SimulatedExecutor(space, NB201Benchmark("cifar10"), workers=8)
>>> loop = SearchLoop(RandomSearch(space, seed=0), ex, time_budget=12_000)
>>> results = loop.run()
>>> ex.now() >= 12_000, ex.max_in_flight, len(results) > 8 * 12_000 / 210
(True, 8, True)
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from nas.core.objectives import Objectives
from nas.core.registry import register_executor, tables
from nas.core.space import SearchSpace
from nas.core.types import Arch, FailureKind, Outcome, Report, Result, Trial
from nas.engine.protocol import BoundedCheckpoints, Event, EventKind, ExecutorConfig, KeepRule, PrefetchRule
from nas.engine.slots import SlotLoads
from nas.train.constraints import LIMITS, Constraints


class TabularBenchmark(Protocol):
    epochs: int

    def query(self, arch: Arch) -> tuple[float, float, dict[str, Any]]: ...


class UnsupportedTrial(ValueError):
    """A trial a tabular benchmark has no answer for."""


@dataclasses.dataclass
class _Run:
    """One submission: its stages (epoch, seconds, metrics, scores), each reported at its end, or the
    result it fails with at no cost; where it runs and how far it got."""

    trial: Trial
    stages: list[tuple[int, float, dict[str, Any], list[float]]]
    failed: Result | None = None
    worker: int = -1
    start: float = 0.0
    ends: list[float] = dataclasses.field(default_factory=list)  # each stage's report time
    reported: int = 0  # stages reported so far
    started: bool = False


@register_executor("simulated")
class SimulatedExecutor:
    """``workers`` simulated workers answering from ``benchmark``; ``noise``: standard deviation of
    Gaussian noise added to each reward (0: the table's value), drawn from a generator seeded with
    ``seed``; ``objectives``: metric specs (default ``val_acc`` maximised); ``epochs``: what a trial
    without ``epochs`` trains (default the benchmark's). Results carry simulated ``start_time``/``end_time``
    and the worker (``sim-0``, ...). ``round_trip``: simulated seconds from a result (or a report at a
    decision epoch) leaving its worker to the answer arriving there; ``prefetch``: "auto", True or False;
    ``constraints``: limits on the table's reported costs (a candidate over one is INFEASIBLE)."""

    needs_ray = False

    def __init__(self, space: SearchSpace, benchmark: TabularBenchmark, *, workers: int = 1,
                 seed: int | None = None, noise: float = 0.0, round_trip: float = 0.0,
                 prefetch: bool | str = "auto", objectives: Sequence[str] | str = ("val_acc:max",),
                 epochs: int | None = None, constraints: Constraints | None = None) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
        if not noise >= 0:
            raise ValueError(f"noise must be >= 0, got {noise!r}")
        if not round_trip >= 0:
            raise ValueError(f"round_trip must be >= 0 simulated seconds, got {round_trip!r}")
        self.space, self.benchmark, self.workers = space, benchmark, workers
        self.fidelities: tuple[int, ...] = tuple(getattr(benchmark, "fidelities", (benchmark.epochs,)))
        self.reports = hasattr(benchmark, "query_epochs")
        self.epochs = benchmark.epochs if epochs is None else epochs
        if self.epochs not in self.fidelities:
            raise ValueError(f"epochs must be one the benchmark answers, {list(self.fidelities)}; got {epochs!r}")
        self.objectives = Objectives(objectives)
        self.constraints = constraints if constraints is not None and constraints.active else None
        if self.constraints is not None:
            self._check_reported(self.constraints)
        self.noise, self.round_trip = float(noise), float(round_trip)
        self.prefetch = PrefetchRule(prefetch)
        self.prefetch.observe_round_trip(self.round_trip)
        self.rng = np.random.default_rng(seed)
        self._now = 0.0
        self._events: list[tuple[float, int, EventKind, _Run]] = []  # (time, seq, kind, run)
        self._seq = 0
        self._runs: dict[int, _Run] = {}  # trial id -> its run, sent to or running on a worker
        self._queued: list[collections.deque[_Run]] = [collections.deque() for _ in range(workers)]
        self._slots = SlotLoads(workers, up=True)  # trials each worker holds: the one sent or running, one queued
        self._ended: list[Event] = []  # trials stopped, for the next poll
        self._decided: list[tuple[_Run, Outcome]] = []  # trials stopped or paused at a report, for the next poll
        self._resumable: dict[int, int] = {}  # trial id -> epochs reached, for a promotion to continue
        self.checkpoints = BoundedCheckpoints()  # (nothing is trained, so no weights are ever kept)
        self._running = self._held = self._n_queued = 0  # running; sent, running or queued; queued
        self.max_in_flight = 0  # the most trials ever running at once (never above ``workers``)
        self.max_queued = 0  # the most trials ever held at workers beyond those running (prefetch)
        self.work = 0.0  # simulated training seconds of every trial delivered

    def _check_reported(self, constraints: Constraints) -> None:
        """Refuse a limit on a cost the table does not report (asked of one architecture of the space, drawn from a
        generator of its own: the executor's noise is not touched)."""
        metrics = self._query(self.space.sample(np.random.default_rng(0)), self.epochs)[2]
        missing = [f"{metric} ({name})" for name, metric in LIMITS.items()
                   if getattr(constraints, name) is not None and metric not in metrics]
        if missing:
            raise ValueError(f"the simulated executor's table reports no {', '.join(missing)}: the limit cannot be "
                             f"checked; leave it out, or run the search on the inprocess or ray executor")

    def check_scheduler(self, name: str, rungs: Sequence[int]) -> None:
        """Refuse a scheduler that could decide nothing here: the table reports a trial only at its fidelities that are
        the scheduler's rungs, below the trial's epochs (``--scheduler median``, which has no rungs, or ASHA's default
        rungs 1, 3, 9, ... ran every trial to the end, as with no scheduler, and said nothing)."""
        # (levels=[12, 100, 200]: rung 100 heard nothing, the run was that of levels [12, 200])
        dead = [r for r in rungs if r < self.epochs and r not in self.fidelities]
        if any(f in rungs for f in self.fidelities if f < self.epochs):  # (it decides somewhere: everywhere?)
            if dead:
                raise ValueError(f"scheduler {name!r} would never decide at its rung{'s' * (len(dead) > 1)} "
                                 f"{', '.join(map(str, dead))} on the simulated executor: its table reports a trial "
                                 f"only at {' and '.join(map(str, self.fidelities))} epochs; give it levels of those")
            return
        answers = " and ".join(map(str, self.fidelities))
        has = (f"its rungs ({', '.join(map(str, rungs))}) include none of them below the trials' {self.epochs}"
               if rungs else "it has no rungs (it decides at every epoch)")
        hint = (f"give asha or hyperband the table's epochs as levels (--scheduler-option "
                f"levels=[{','.join(map(str, self.fidelities))}] --epochs {max(self.fidelities)})"
                if len(self.fidelities) > 1 else "run it without a scheduler")
        raise ValueError(f"scheduler {name!r} would decide nothing on the simulated executor: its table reports a "
                         f"trial only at {answers} epochs, and {has}; {hint}")

    @classmethod
    def from_config(cls, cfg: ExecutorConfig) -> SimulatedExecutor:
        """Options as the constructor's; a ``benchmark`` name is one of :data:`nas.core.registry.tables`
        (default ``nb201-cifar10``: NAS-Bench-201 on CIFAR-10, both fidelities; an unknown name is a ValueError
        naming the known ones). The run's objectives, and its epochs where the table has that schedule, are the
        defaults."""
        opts = cfg.checked_options("simulated")
        bench = opts.pop("benchmark", "nb201-cifar10")
        if isinstance(bench, str):
            bench = tables.get(bench)()
        constraints = None
        if (t := cfg.settings) is not None:
            opts.setdefault("objectives", list(t.objectives))
            if t.epochs in getattr(bench, "fidelities", (bench.epochs,)):
                opts.setdefault("epochs", t.epochs)
            if t.proxy_screen is not None:
                raise ValueError(f"the simulated executor scores no zero-cost proxy (proxy_screen "
                                 f"{t.proxy_screen!r}): leave it out, or run the search on the inprocess or ray "
                                 f"executor")
            if t.trial_timeout is not None:
                raise ValueError(f"the simulated executor runs no trial that could hang (trial_timeout "
                                 f"{t.trial_timeout!r}): leave it out, or run the search on the inprocess or ray "
                                 f"executor")
            unset = type(t)().max_params  # (the default bound: no limit the user set, so no refusal either)
            constraints = Constraints(max_params=None if t.max_params == unset else t.max_params,
                                      max_flops=t.max_flops, max_latency_ms=t.max_latency_ms)
        return cls(cfg.space, bench, workers=cfg.workers, seed=cfg.seed, constraints=constraints, **opts)

    @property
    def slots(self) -> int:
        return self.workers

    def free_slots(self) -> int:
        return self._slots.count(self.prefetch.on)

    def in_flight(self) -> int:
        return self._held

    def now(self) -> float:
        return self._now

    def resume_at(self, time: float, ended: Mapping[int, tuple[Outcome, int]]) -> None:
        """A resumed run's clock goes on from ``time``, the last its journal holds, and the trials it paused or
        completed before (``ended``) may be promoted, as here (:class:`nas.engine.protocol.SimulatedClock`)."""
        if self._held or self._events:
            raise RuntimeError("resume_at comes before any trial is submitted")
        self._now = max(self._now, float(time))
        self._resumable.update({tid: epoch for tid, (outcome, epoch) in ended.items()
                                if outcome in (Outcome.COMPLETE, Outcome.PAUSED)})

    # -- submission --------------------------------------------------------------------------------
    def _plan(self, trial: Trial) -> tuple[int, int]:
        """(epochs already trained, epochs to reach) of a trial; UnsupportedTrial where the table has
        no answer."""
        asks = [f"hparams={dict(trial.hparams)}"] if trial.hparams else []
        done = 0
        if trial.checkpoint_from is not None:
            if trial.checkpoint_from == trial.trial_id and trial.epochs and trial.trial_id in self._resumable:
                done = self._resumable[trial.trial_id]
            else:
                asks.append(f"checkpoint_from={trial.checkpoint_from}")
        target = done + (trial.epochs if trial.epochs is not None else self.epochs)
        if target not in self.fidelities or (trial.epochs is not None and trial.epochs < 1):
            asks.append(f"epochs={trial.epochs}" + (f" after {done}" if done else ""))
        if asks:
            answers = " or ".join(str(f) for f in self.fidelities)
            resumes = ", or continuing a trial it paused," if len(self.fidelities) > 1 else ""
            raise UnsupportedTrial(
                f"trial {trial.trial_id} asks for {', '.join(asks)}; the tabular benchmark answers only "
                f"{answers}-epoch training from scratch{resumes} with fixed hyperparameters")
        return done, target

    def _query(self, arch: Arch, epochs: int) -> tuple[float, float, dict[str, Any]]:
        if self.reports:
            return self.benchmark.query_epochs(arch, epochs)  # type: ignore[attr-defined,no-any-return]
        return self.benchmark.query(arch)

    def _stage(self, arch: Arch, epochs: int) -> tuple[int, float, dict[str, Any], list[float]]:
        """One schedule's answer; KeyError/ValueError where the table or the objectives have none."""
        reward, seconds, metrics = self._query(arch, epochs)
        if self.noise:
            reward += float(self.rng.normal(0.0, self.noise))
        metrics = {**metrics, "val_acc": reward, "train_seconds": seconds}
        try:
            scores = list(self.objectives.scores(metrics))
        except ValueError as e:
            raise _ObjectiveMissing(str(e)) from e
        return epochs, float(seconds), metrics, scores

    def _answer(self, trial: Trial, done: int, target: int, wait_epochs: frozenset[int]) -> _Run:
        self._resumable.pop(trial.trial_id, None)
        rungs = [f for f in self.fidelities if done < f < target and f in wait_epochs] if self.reports else []
        try:
            stages = [self._stage(trial.arch, e) for e in (*rungs, target)]
        except _ObjectiveMissing as e:
            return _Run(trial, [], Result.failed(trial.trial_id, str(e), FailureKind.OBJECTIVE_MISSING))
        except (KeyError, ValueError) as e:  # not an architecture of the table: a failed trial, at no cost
            return _Run(trial, [], Result.failed(trial.trial_id, f"{type(e).__name__}: {e}"))
        violation = self.constraints.check(stages[0][2]) if self.constraints is not None else None
        if violation is not None:  # (as a worker refuses what it measured: nothing is trained, nothing charged)
            costs = {m: stages[0][2][m] for m in LIMITS.values() if m in stages[0][2]}
            return _Run(trial, [], Result.failed(trial.trial_id, str(violation), FailureKind.INFEASIBLE, metrics=costs))
        return _Run(trial, stages)

    def submit(self, trial: Trial, *, keep: KeepRule | None = None, wait_epochs: Collection[int] = ()) -> None:
        """``wait_epochs``: the fidelities below its own at which the trial reports and waits for the loop's
        answer (a scheduler's rungs; the simulated worker always waits). ``keep``: no weights exist here."""
        done, target = self._plan(trial)
        worker = self._slots.take(self.prefetch.on)
        run = self._answer(trial, done, target, frozenset(int(e) for e in wait_epochs))
        self._slots.add(worker, 1)
        self._held += 1
        if self._slots.load[worker] == 1:
            self._send(worker, run, self._now + self.round_trip)
        else:  # prefetched: it starts the moment the running trial ends
            self._queued[worker].append(run)
            self._n_queued += 1
            self.max_queued = max(self.max_queued, self._n_queued)

    def _send(self, worker: int, run: _Run, start: float) -> None:
        run.worker, run.start = worker, start
        t = start
        for i, (_, seconds, _, _) in enumerate(run.stages):
            t += seconds + (self.round_trip if i else 0.0)  # a worker waits one round trip at a rung
            run.ends.append(t)
        self._runs[run.trial.trial_id] = run
        self._push(start, EventKind.STARTED, run)
        if run.failed is not None:
            self._push(start, EventKind.FINISHED, run)
        for t in run.ends:
            self._push(t, EventKind.REPORT, run)

    def _push(self, when: float, kind: EventKind, run: _Run) -> None:
        heapq.heappush(self._events, (when, self._seq, kind, run))
        self._seq += 1

    def _release(self, run: _Run, end: float) -> None:
        """``run``'s worker is done with it at ``end``: the next one queued there starts now."""
        self._runs.pop(run.trial.trial_id, None)
        if not run.started or run.reported < len(run.stages):  # events of it are still queued
            self._events = [e for e in self._events if e[3] is not run]
            heapq.heapify(self._events)
        if run.started:
            self._running -= 1
            self.work += sum(s[1] for s in run.stages[:run.reported])
            self.prefetch.observe_duration(end - run.start)
        worker = run.worker
        self._slots.add(worker, -1)
        self._held -= 1
        if self._queued[worker]:
            self._n_queued -= 1
            self._send(worker, self._queued[worker].popleft(), self._now)

    def _result(self, run: _Run, end: float, outcome: Outcome = Outcome.COMPLETE) -> Result:
        if run.failed is not None:
            result = run.failed
        else:
            epoch, _, metrics, scores = run.stages[run.reported - 1]
            result = Result(run.trial.trial_id, outcome, score=scores[0], scores=scores, epoch=epoch,
                            metrics=metrics)
        result.start_time, result.end_time = run.start, end
        result.worker, result.node = f"sim-{run.worker}", "simulated"
        return result

    # -- the loop's calls --------------------------------------------------------------------------
    def poll(self, timeout: float | None = None) -> list[Event]:
        """Events in time order up to and including the next report or completion: the clock moves to
        its time (never backwards). A report at the trial's last epoch comes with its completion."""
        out: list[Event] = []
        for run, outcome in self._decided:
            end = run.ends[run.reported - 1]
            self._release(run, end)
            if outcome is Outcome.PAUSED:
                self._resumable[run.trial.trial_id] = run.stages[run.reported - 1][0]
            out.append(Event.finished(run.trial, self._result(run, end, outcome)))
        if self._decided or self._ended:
            out += self._ended
            self._decided, self._ended = [], []
            return out
        while self._events:
            when, _, kind, run = heapq.heappop(self._events)
            self._now = max(self._now, when)
            worker = f"sim-{run.worker}"
            if kind is EventKind.STARTED:
                run.started = True
                self._running += 1
                self.max_in_flight = max(self.max_in_flight, self._running)
                out.append(Event.started(run.trial, time=when, worker=worker))
                continue
            if kind is EventKind.REPORT:
                run.reported += 1
                epoch, _, metrics, scores = run.stages[run.reported - 1]
                if self.reports:
                    out.append(Event.reported(run.trial, Report(run.trial.trial_id, epoch, metrics, scores[0], when,
                                                                worker)))
                if run.reported < len(run.stages):
                    break  # the worker waits for the loop's answer
            self._release(run, when)
            if run.failed is None:
                self._resumable[run.trial.trial_id] = run.stages[-1][0]
            out.append(Event.finished(run.trial, self._result(run, when)))
            break
        return out

    def stop(self, trial_id: int, outcome: Outcome) -> None:
        """STOPPED or PAUSED: a trial that has reported ends at that report, with it as the result (a paused
        one may be continued by a promotion); as from a real worker, the result, and the worker's slot with it,
        come from the next ``poll``; a trial that has not reported or already ended is left alone. CANCELLED:
        the trial ends now (sent, running or queued) without a result."""
        if outcome is not Outcome.CANCELLED:
            run = self._runs.get(trial_id)
            if run is None or run.reported == 0:
                return
            del self._runs[trial_id]
            self._decided.append((run, outcome))
            return
        for worker, queue in enumerate(self._queued):
            for run in queue:
                if run.trial.trial_id == trial_id:
                    queue.remove(run)
                    self._n_queued -= 1
                    self._held -= 1
                    self._slots.add(worker, -1)
                    self._ended.append(Event.finished(run.trial, Result.cancelled(trial_id)))
                    return
        running = self._runs.get(trial_id)
        if running is None:
            return
        run, start = running, running.start
        if run.started:
            self.work += self._now - start - sum(s[1] for s in run.stages[:run.reported])  # charged below
        self._release(run, self._now)
        self._ended.append(Event.finished(run.trial, Result.cancelled(
            trial_id, start_time=min(start, self._now), end_time=self._now, worker=f"sim-{run.worker}",
            node="simulated")))

    def shutdown(self) -> None:
        pass


class _ObjectiveMissing(ValueError):
    """An objective metric the benchmark does not report."""
