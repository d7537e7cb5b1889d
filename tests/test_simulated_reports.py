"""The simulated executor's intermediate reports on NAS-Bench-201's two fidelities (12 and 200 epochs),
driven directly through submit / poll / stop, and ASHA's hand-given rung levels that match them."""

from __future__ import annotations

import dataclasses
import re

import pytest

from nas.core.types import Decision, Outcome, Trial, TrialState
from nas.engine.loop import SearchLoop
from nas.engine.protocol import EventKind, ExecutorConfig, KeepRule, build_executor
from nas.engine.simulated import SimulatedExecutor, UnsupportedTrial
from nas.engine.tabular.nb201_table import NB201Fidelities, query_epochs
from nas.schedulers.asha import ASHA
from nas.schedulers.hyperband import Hyperband
from nas.search_spaces.nb201 import NB201Space, from_op_code
from nas.strategies.random import RandomSearch
from nas.train.settings import TrainSettings

CELL, OTHER = from_op_code("334131"), from_op_code("000000")
T12, T200 = query_epochs(CELL, 12)[1], query_epochs(CELL, 200)[1]
ACC12, ACC200 = query_epochs(CELL, 12)[0], query_epochs(CELL, 200)[0]
REPORT, STARTED, FINISHED = EventKind.REPORT, EventKind.STARTED, EventKind.FINISHED


class Sim:
    """The simulated executor as the loop drives it: each trial submitted with the run's rungs (where its worker
    waits for an answer), and a scheduler's STOP or PAUSE sent as ``stop(trial_id, outcome)``."""

    def __init__(self, ex, rungs):
        self.ex, self.rungs = ex, rungs

    def submit(self, trial):
        self.ex.submit(trial, keep=KeepRule(), wait_epochs=self.rungs)

    def decide(self, trial_id, decision):
        self.ex.stop(trial_id, Outcome.PAUSED if decision is Decision.PAUSE else Outcome.STOPPED)

    def __getattr__(self, name):
        return getattr(self.ex, name)


def executor(workers=1, rungs=(12, 200), **kw):
    return Sim(SimulatedExecutor(NB201Space(), NB201Fidelities("cifar10"), workers=workers, **kw), rungs)


def kinds(events):
    return [(e.kind, e.report.epoch) if e.kind is REPORT else e.kind for e in events]


def test_a_12_epoch_trial_reports_at_its_finish_then_finishes():
    ex = executor()
    ex.submit(Trial(0, CELL))  # no epochs: the benchmark's 12
    assert kinds(ex.poll()) == [STARTED, (REPORT, 12), FINISHED]  # its last report comes with its result
    ex2 = executor()
    ex2.submit(Trial(0, CELL))
    report, done = ex2.poll()[1:]
    assert report.time == done.time == ex2.now() == pytest.approx(T12) and report.worker == "sim-0"
    assert report.report.score == report.report.metrics["val_acc"] == pytest.approx(ACC12)
    result = done.result
    assert result.state is TrialState.COMPLETE and result.outcome == "COMPLETE" and result.epoch == 12
    assert result.scores == [result.score] == [pytest.approx(ACC12)]
    assert result.metrics["valid_acc_200"] == pytest.approx(90.7693, abs=1e-3)


def test_a_200_epoch_trial_stops_at_the_12_epoch_rung_and_pays_for_it_alone():
    ex = executor()
    ex.submit(Trial(0, CELL, epochs=200))
    events = ex.poll()
    assert kinds(events) == [STARTED, (REPORT, 12)] and ex.now() == pytest.approx(T12)  # the worker waits
    ex.decide(0, Decision.STOP)
    assert ex.free_slots() == 0  # as from a real worker, the slot frees with the result
    [done] = ex.poll()
    assert ex.free_slots() == 1
    result = done.result
    assert (result.outcome, result.epoch) == ("STOPPED", 12)
    assert result.end_time == pytest.approx(T12) and result.score == pytest.approx(ACC12)
    assert ex.work == pytest.approx(T12)  # the 12-epoch schedule alone was paid for
    ex.submit(Trial(1, OTHER))  # the freed worker takes the next trial at once
    assert ex.poll()[0].time == pytest.approx(T12)


def test_a_200_epoch_trial_that_goes_on_retrains_from_scratch_at_full_cost():
    ex = executor()
    ex.submit(Trial(0, CELL, epochs=200))
    assert kinds(ex.poll()) == [STARTED, (REPORT, 12)]
    events = ex.poll()  # no decision: it goes on
    assert kinds(events) == [(REPORT, 200), FINISHED]
    assert ex.now() == pytest.approx(T12 + T200) and ex.work == pytest.approx(T12 + T200)
    assert events[1].result.epoch == 200 and events[1].result.score == pytest.approx(ACC200)
    ex.decide(0, Decision.STOP)  # too late: it has finished; nothing happens
    assert ex.poll() == [] and ex.free_slots() == 1


def test_without_a_rung_at_12_a_200_epoch_trial_trains_once():
    ex = executor(rungs=())
    ex.submit(Trial(0, CELL, epochs=200))
    assert kinds(ex.poll()) == [STARTED, (REPORT, 200), FINISHED] and ex.now() == pytest.approx(T200)
    ex = executor(rungs=(), epochs=200)  # the executor's default for trials that name no epochs
    ex.submit(Trial(0, CELL))
    assert ex.poll()[-1].result.epoch == 200


def test_pause_then_promotion_of_the_same_trial_id_charges_the_full_200_epochs():
    trial = Trial(0, CELL, epochs=200)
    ex = executor()
    ex.submit(trial)
    [_, report] = ex.poll()
    ex.decide(0, Decision.PAUSE)
    [paused] = ex.poll()
    assert (paused.result.outcome, paused.result.epoch) == ("PAUSED", 12)
    promoted = dataclasses.replace(trial, epochs=200 - 12, checkpoint_from=0, save_checkpoint=True)
    ex.submit(promoted)
    events = ex.poll()
    assert kinds(events) == [STARTED, (REPORT, 200), FINISHED] and events[0].time == pytest.approx(T12)
    result = events[-1].result
    assert result.epoch == 200 and result.outcome == "COMPLETE" and result.score == pytest.approx(ACC200)
    assert (result.start_time, result.end_time) == (pytest.approx(T12), pytest.approx(T12 + T200))
    assert ex.work == pytest.approx(T12 + T200)  # 1.06 x the 200-epoch time in all
    with pytest.raises(UnsupportedTrial, match="asks for epochs=188 after 200"):
        ex.submit(promoted)  # it finished at 200: there is no later schedule to continue to


@pytest.mark.parametrize("fields", [{"checkpoint_from": 0, "epochs": 188}, {"checkpoint_from": 5, "epochs": 188},
                                    {"epochs": 50}, {"hparams": {"lr": 0.1}}])
def test_what_the_table_cannot_answer_is_refused(fields):
    ex = executor()
    with pytest.raises(UnsupportedTrial, match=r"asks for .*; the tabular benchmark answers only 12 or 200-epoch"):
        ex.submit(Trial(0, CELL, **fields))
    assert ex.free_slots() == 1


def test_a_stopped_trial_cannot_be_promoted_and_a_promotion_must_reach_a_fidelity():
    ex = executor()
    ex.submit(Trial(0, CELL, epochs=200))
    ex.poll()
    ex.decide(0, Decision.STOP)
    ex.poll()
    with pytest.raises(UnsupportedTrial, match="checkpoint_from=0"):
        ex.submit(Trial(0, CELL, epochs=188, checkpoint_from=0))
    ex.submit(Trial(1, CELL, epochs=200))
    ex.poll()
    ex.decide(1, Decision.PAUSE)
    ex.poll()
    with pytest.raises(UnsupportedTrial, match="epochs=100 after 12"):
        ex.submit(Trial(1, CELL, epochs=100, checkpoint_from=1))


def test_objectives_set_the_scores_and_a_missing_one_fails_the_trial():
    ex = executor(objectives=["latency_ms:min", "val_acc"])
    ex.submit(Trial(0, CELL))
    report, done = ex.poll()[1:]
    latency = query_epochs(CELL, 12)[2]["latency_ms"]
    assert report.report.score == done.result.score == pytest.approx(-latency)
    assert done.result.scores == [pytest.approx(-latency), pytest.approx(ACC12)]
    ex = executor(objectives=["loss:min"])
    ex.submit(Trial(0, CELL))
    [_, done] = ex.poll()
    assert done.result.state is TrialState.FAILED and done.result.failure == "OBJECTIVE_MISSING"
    assert "objective metric 'loss' missing from the result; it reported:" in done.result.error
    assert ex.now() == 0.0


def test_a_waiting_worker_pays_a_round_trip_at_each_rung():
    ex = executor(round_trip=2.0)
    ex.submit(Trial(0, CELL, epochs=200))
    assert [e.time for e in ex.poll()] == [2.0, pytest.approx(2.0 + T12)]
    assert ex.poll()[0].time == pytest.approx(2.0 + T12 + 2.0 + T200)


def test_same_seed_same_events_with_noise():
    def run():
        ex = executor(workers=3, seed=4, noise=0.01)
        out = []
        for i in range(6):
            if ex.free_slots():
                ex.submit(Trial(i, NB201Space().sample(__import__("numpy").random.default_rng(i)), epochs=200))
            for e in ex.poll():
                out.append((e.kind, e.trial.trial_id, e.time, e.report.score if e.report else None))
                if e.kind is REPORT and e.report.epoch == 12 and e.trial.trial_id % 2:
                    ex.decide(e.trial.trial_id, Decision.STOP)
        return out

    first = run()
    assert first == run() and any(k is REPORT and s is not None for k, _, _, s in first)


def test_from_config_builds_the_two_fidelity_benchmark_and_checks_options():
    ex = build_executor("simulated", ExecutorConfig(NB201Space(), options={"epochs": 200, "objectives": ["val_acc"]}))
    assert isinstance(ex.benchmark, NB201Fidelities) and ex.epochs == 200
    run = TrainSettings(epochs=200, objectives=("val_acc", "latency_ms:min"))
    ex = build_executor("simulated", ExecutorConfig(NB201Space(), settings=run))  # the run's defaults
    assert ex.epochs == 200 and ex.objectives.to_list() == ["val_acc:max", "latency_ms:min"]
    ex = build_executor("simulated", ExecutorConfig(NB201Space(), settings=TrainSettings(epochs=5)))
    assert ex.epochs == 12  # a schedule the table does not have: its own
    with pytest.raises(ValueError, match=r"epochs must be one the benchmark answers, \[12, 200\]; got 50"):
        build_executor("simulated", ExecutorConfig(NB201Space(), options={"epochs": 50}))
    with pytest.raises(ValueError, match="objective mode for 'val_acc' must be max or min"):
        build_executor("simulated", ExecutorConfig(NB201Space(), options={"objectives": ["val_acc:up"]}))


# -- ASHA's rungs given by hand ----------------------------------------------------------------------
def test_asha_levels_make_two_rungs_that_eta_alone_cannot():
    asha = ASHA(max_epochs=200, levels=[12, 200], variant="promotion")
    assert asha.rungs == (12, 200) and asha.eta == 3 and asha.grace_period == 12
    assert [asha.on_report(t, 12, s) for t, s in enumerate([0.5, 0.8, 0.6])] == [Decision.PAUSE] * 3
    for t, s in enumerate([0.5, 0.8, 0.6]):
        asha.on_result(t, 12, s)  # the paused runs have ended
    promotion = asha.promote()
    assert (promotion.trial_id, promotion.epoch, promotion.until) == (1, 12, 200)
    assert [b.levels for b in Hyperband(max_epochs=200, levels=[12]).brackets] == [(12, 200), (200,)]
    stopping = ASHA(max_epochs=200, levels=[12])
    assert [stopping.on_report(t, 12, s) for t, s in enumerate([0.5, 0.4, 0.3, 0.9])] == \
        [Decision.CONTINUE, Decision.STOP, Decision.STOP, Decision.CONTINUE]


@pytest.mark.parametrize("levels", [[], [12, 12], [0, 200], [12, 300], "12", [12.5], [True]])
def test_bad_asha_levels_are_one_line_errors(levels):
    with pytest.raises(ValueError, match=r"^levels must be strictly increasing integers from 1 to max_epochs \(200\)"):
        ASHA(max_epochs=200, levels=levels)
    with pytest.raises(ValueError, match="give levels or grace_period, not both"):
        ASHA(max_epochs=200, levels=[12], grace_period=12)


def test_a_paused_trial_cannot_be_promoted_before_its_result_arrives():
    ex = executor()
    ex.submit(Trial(0, CELL, epochs=200))
    ex.poll()
    ex.decide(0, Decision.PAUSE)
    with pytest.raises(UnsupportedTrial, match="checkpoint_from=0"):
        ex.submit(Trial(0, CELL, epochs=188, checkpoint_from=0))  # (no slot is free yet either)
    assert ex.poll()[0].result.outcome == "PAUSED"
    ex.submit(Trial(0, CELL, epochs=188, checkpoint_from=0))


class Counting(RandomSearch):
    """Random search that counts what the loop tells it."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.told, self.updated = [], []

    def tell(self, trial, result):
        self.told.append(trial.trial_id)

    def update(self, trial, result):
        self.updated.append((trial.trial_id, result.epoch))


@pytest.mark.parametrize("variant", ["promotion", "stopping"])
def test_the_search_loop_runs_asha_on_the_two_fidelities(variant):
    ex = executor(workers=3, rungs=(), epochs=200).ex  # (the loop gives the scheduler's rungs itself)
    strategy = Counting(NB201Space(), seed=0)
    asha = ASHA(max_epochs=200, levels=[12, 200], variant=variant, seed=0)
    loop = SearchLoop(strategy, ex, time_budget=20_000, scheduler=asha)
    loop.run()
    records = [r for r in loop.book.records.values() if r.result is not None]  # (the last ones run past the budget)
    assert sorted(strategy.told) == sorted(set(strategy.told)) == sorted(r.trial.trial_id for r in records)
    ended = {r.result.outcome for r in records}
    full = [r for r in records if r.result.epoch == 200]
    assert full and ended == {"COMPLETE", "PAUSED" if variant == "promotion" else "STOPPED"}
    if variant == "promotion":  # a promoted trial: paused at 12, told then; its 200-epoch result is an update
        assert sorted(strategy.updated) == sorted((r.trial.trial_id, 200) for r in full)
        assert all(r.runs == 2 for r in full) and loop.decisions["PAUSE"] >= len(records)
    else:
        assert strategy.updated == [] and loop.decisions["STOP"] >= sum(r.result.outcome == "STOPPED" for r in records)


@pytest.mark.parametrize(("kw", "said"), [
    (dict(scheduler="median", epochs=200), "scheduler 'median' would decide nothing on the simulated executor: its "
     "table reports a trial only at 12 and 200 epochs, and it has no rungs (it decides at every epoch); give asha or "
     "hyperband the table's epochs as levels (--scheduler-option levels=[12,200] --epochs 200)"),
    (dict(scheduler="asha", epochs=200), "scheduler 'asha' would decide nothing on the simulated executor: its table "
     "reports a trial only at 12 and 200 epochs, and its rungs (1, 3, 9, 27, 81, 200) include none of them below "
     "the trials' 200"),
    (dict(scheduler="hyperband", epochs=12, scheduler_options={"levels": [4, 12]}), "its rungs (4, 12) include none "
     "of them below the trials' 12"),
    # (rung 100 heard nothing: the run was that of levels [12, 200], said to be of three rungs)
    (dict(scheduler="asha", epochs=200, scheduler_options={"levels": [12, 100, 200]}), "scheduler 'asha' would never "
     "decide at its rung 100 on the simulated executor: its table reports a trial only at 12 and 200 epochs; give it "
     "levels of those"),
])
def test_a_scheduler_that_would_decide_nothing_on_the_table_is_refused(tmp_path, kw, said):
    """(Each ran every trial to its end, as with no scheduler, and said nothing: a study of what ASHA or the median
    rule save on NAS-Bench-201 measured nothing.)"""
    import nas

    with pytest.raises(ValueError, match=re.escape(said)):
        nas.search("nb201", "random", budget=4, executor="simulated", seed=0, run_dir=tmp_path / "run",
                   progress=False, **kw)
    assert not (tmp_path / "run").exists()
    df = nas.search("nb201", "random", budget=8, executor="simulated", seed=0, run_dir=tmp_path / "ok",
                    progress=False, epochs=200, scheduler="asha", scheduler_options={"levels": [12, 200]})
    assert (df.outcome == "STOPPED").any()  # (the table's epochs as the rungs: it decides)


def test_a_run_made_before_the_refusal_resumes_as_it_was_made(tmp_path):
    """(A simulated run made with the median rule before it was refused could not be resumed: the refusal named
    options a resume cannot change.) Such a run decided nothing, as one with no scheduler: made so, then named so."""
    import json

    import nas

    run = tmp_path / "run"
    nas.search("nb201", "random", budget=4, executor="simulated", seed=0, run_dir=run, progress=False)
    cfg = json.loads((run / "run.json").read_text())
    cfg["search"]["scheduler"] = "median"
    (run / "run.json").write_text(json.dumps(cfg))
    df = nas.search("nb201", "random", budget=6, executor="simulated", seed=0, run_dir=run, progress=False,
                    scheduler="median", resume=True)
    assert len(df) == 6 and df.trial_id.is_unique
