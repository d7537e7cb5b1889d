"""The executor contract, over every registered executor (ray on the real local cluster), and the measured
prefetch rule that the Ray and simulated executors share."""

from __future__ import annotations

import pytest

from nas.core import registry
from nas.core.types import Outcome, Report, Result, Trial, TrialState
from nas.engine.interfaces import Callback
from nas.engine.loop import SearchLoop
from nas.engine.protocol import Event, EventKind, Executor, ExecutorConfig, PrefetchRule, build_executor
from nas.engine.simulated import SimulatedExecutor
from nas.search_spaces.toy import ToySpace, toy_score
from nas.strategies.random import RandomSearch
from nas.train.simple import scored


class ToyTable:
    """A tabular benchmark over the toy space: the toy score, ``base + d0`` simulated seconds per trial."""

    epochs = 1

    def __init__(self, base: float = 1.0) -> None:
        self.base = base

    def query(self, arch):
        return toy_score(arch), self.base + arch["d0"], {}


def make(name, request, **options):
    if name == "ray":
        request.getfixturevalue("ray_local")
    if name == "simulated":
        options = {"benchmark": ToyTable(), "round_trip": 0.5, **options}
    cfg = ExecutorConfig(ToySpace(), train=scored(toy_score), workers=2,
                         cpus_per_trial=0.5, seed=0, namespace=f"nas-contract-{name}", options=options)
    return build_executor(name, cfg)


class Recorder(Callback):
    """Checks the loop's states as the events come: QUEUED at submit, RUNNING on ``started`` (in the loop's book,
    which the test hands it, and in the status each callback gets)."""

    def __init__(self):
        self.log, self.most_running, self.queued_seen, self.book = [], 0, 0, None

    def on_submit(self, status, trial):
        assert self.book.get(trial.trial_id).state is TrialState.QUEUED
        self.log.append(("submitted", trial.trial_id))
        self.queued_seen = max(self.queued_seen, status.queued)

    def on_event(self, status, event):
        assert self.book.get(event.trial.trial_id).state is TrialState.RUNNING
        assert status.running == self.book.count(TrialState.RUNNING) >= 1
        if event.kind is EventKind.STARTED:
            self.log.append(("started", event.trial.trial_id))
        self.most_running = max(self.most_running, status.running)

    def on_result(self, status, trial, result):
        self.log.append(("finished", trial.trial_id))


EXECUTORS = [pytest.param(n, marks=pytest.mark.ray) if n == "ray" else n for n in registry.executors.names()]


def test_the_builtin_executors_are_registered():
    assert {"ray", "inprocess", "simulated"} <= set(registry.executors.names())
    with pytest.raises(ValueError, match=r"unknown executor 'rey' \(did you mean 'ray'\?\); known: inprocess, "
                       "ray, simulated"):
        build_executor("rey", ExecutorConfig(ToySpace()))


@pytest.mark.parametrize("name", EXECUTORS)
def test_every_executor_runs_a_toy_search_to_its_budget(name, request):
    ex = make(name, request)
    rec = Recorder()
    try:
        assert isinstance(ex, Executor)
        loop = SearchLoop(RandomSearch(ToySpace(), seed=0), ex, budget=12, callbacks=[rec])
        rec.book = loop.book
        results = loop.run()
    finally:
        ex.shutdown()
    assert sorted(t.trial_id for t, _ in results) == list(range(12))
    assert all(r.ok and r.score == toy_score(t.arch) for t, r in results)
    for trial_id in range(12):  # each trial: submitted, then started, then finished, once each
        mine = [kind for kind, i in rec.log if i == trial_id]
        assert mine == ["submitted", "started", "finished"], (trial_id, mine)
    assert rec.queued_seen >= 1  # submitted trials are QUEUED until their worker begins them
    assert 1 <= rec.most_running <= 2  # never more RUNNING than workers
    assert loop.status().running == loop.status().queued == 0


@pytest.mark.parametrize("name", EXECUTORS)
def test_unknown_options_are_refused_by_name(name, request):
    with pytest.raises(ValueError, match=rf"unknown options \['colour'\] for executor '{name}'"):
        make(name, request, colour="red")


def test_events_are_values():
    trial = Trial(1, {"d0": 0})
    done = Event.finished(trial, Result(1, Outcome.COMPLETE, score=1.0, end_time=5.0, worker="w"))
    assert (done.kind, done.time, done.worker) == (EventKind.FINISHED, 5.0, "w")
    report = Event.reported(trial, Report(1, 2, {"val_acc": 0.5}, time=3.0, worker="w"))
    assert report.kind is EventKind.REPORT and report.report.epoch == 2 and report.report.metrics == {"val_acc": 0.5}
    assert (report.time, report.worker) == (3.0, "w")


# -- the prefetch rule -----------------------------------------------------------------------------------
def test_the_rule_prefetches_only_short_trials_and_only_once_measured():
    rule = PrefetchRule(ratio=20, min_samples=3)
    rule.observe_round_trip(0.01)
    rule.observe_duration(0.05)
    rule.observe_duration(0.05)
    assert not rule.on  # two samples: not measured yet
    rule.observe_duration(0.05)
    assert rule.on  # 50 ms trials against a 10 ms round trip
    for _ in range(10):
        rule.observe_duration(0.5)  # the median moves to 0.5 s: 50 x the round trip
    assert not rule.on
    assert PrefetchRule(True).on and not PrefetchRule(False).on
    with pytest.raises(ValueError, match="prefetch must be 'auto', True or False, got 'sometimes'"):
        PrefetchRule("sometimes")


def simulated_run(base, prefetch="auto", round_trip=1.0, budget=200):
    ex = SimulatedExecutor(ToySpace(), ToyTable(base), workers=4, round_trip=round_trip, prefetch=prefetch)
    loop = SearchLoop(RandomSearch(ToySpace(), seed=0), ex, budget=budget)
    results = loop.run()
    return ex, loop, results


def test_simulated_short_trials_are_prefetched_and_keep_workers_busy():
    ex, loop, results = simulated_run(base=1.0)  # 1-5 s trials, 1 s round trip: prefetch
    assert ex.prefetch.on and ex.max_queued > 0 and ex.max_in_flight == 4
    _, waiting_loop, _ = simulated_run(base=1.0, prefetch=False)
    assert loop.summary()["utilization"] > waiting_loop.summary()["utilization"] + 0.1
    assert len(results) == 200


def test_simulated_long_trials_are_not_prefetched_and_wait_one_round_trip():
    ex, loop, results = simulated_run(base=100.0)  # 100-104 s trials against a 1 s round trip
    assert not ex.prefetch.on and ex.max_queued == 0
    by_worker = {}
    for _, r in sorted(results, key=lambda tr: tr[1].start_time):
        by_worker.setdefault(r.worker, []).append(r)
    for runs in by_worker.values():  # each next trial starts one round trip after the last one ended
        assert all(b.start_time == pytest.approx(a.end_time + 1.0) for a, b in zip(runs, runs[1:]))


def test_simulated_stop_of_a_queued_trial():
    ex = SimulatedExecutor(ToySpace(), ToyTable(), workers=1, prefetch=True)
    ex.submit(Trial(0, {"d0": 0, "d1": 0, "d2": 0, "d3": 0, "d4": 0}))
    assert ex.free_slots() == 1  # prefetch: one more may queue behind it
    queued = Trial(1, {"d0": 1, "d1": 0, "d2": 0, "d3": 0, "d4": 0})
    ex.submit(queued)
    ex.stop(queued.trial_id, Outcome.CANCELLED)
    [stopped] = ex.poll()
    assert stopped.trial.trial_id == queued.trial_id and stopped.result.outcome is Outcome.CANCELLED
    assert [e.kind for e in ex.poll()] == [EventKind.STARTED, EventKind.FINISHED] and ex.in_flight() == 0


def test_status_and_the_search_actor_line_count_running_and_queued_apart():
    from nas.monitor.metrics import status_line

    lines = []

    class Watch(Callback):
        def on_event(self, status, event):
            lines.append(status_line(status.to_dict()))

    ex = build_executor("inprocess", ExecutorConfig(
        ToySpace(), train=scored(toy_score), workers=2))
    SearchLoop(RandomSearch(ToySpace(), seed=0), ex, budget=4, callbacks=[Watch()]).run()
    # two submitted at once; the in-process executor runs one at a time: 1 running, 1 queued
    stamp, line = lines[0].split(" ", 1)  # a timestamp, then the counts
    assert line == "running: 0/4 finished, 0 failed, busy 1/2, queued 1, best -"
