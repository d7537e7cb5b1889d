"""Reports over a real local Ray cluster: streamed from the trainer actors as they happen, journaled, and the
driver's STOP / PAUSE reaching the worker (at once at a rung, where it waits; within an epoch elsewhere)."""

from __future__ import annotations

import sys

import pytest
import ray
from test_reporting import EPOCHS, curve_train

import nas
from nas.core.scheduler import make_scheduler
from nas.engine.loop import SearchLoop
from nas.engine.ray_pool import RayExecutor
from nas.run.journal import read_records
from nas.search_spaces.macro import MacroSpace
from nas.search_spaces.toy import ToySpace
from nas.strategies.random import RandomSearch
from nas.train.settings import TrainSettings

pytestmark = pytest.mark.ray
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
ray.cloudpickle.register_pickle_by_value(sys.modules[curve_train.__module__])

SETTINGS = TrainSettings(epochs=EPOCHS, device="cpu", threads=1, measure_costs=False)


@pytest.fixture(scope="module")
def digits():
    return nas.load_dataset("digits")


def test_asha_stops_at_the_rung_on_ray_and_every_report_is_journaled(ray_local, tmp_path, digits):
    df = nas.search(ToySpace(), "random", budget=10, workers=2, seed=0, data=digits, settings=SETTINGS,
                    train=curve_train, scheduler="asha", run_dir=tmp_path / "run")
    stopped = df[df.outcome == "STOPPED"]
    assert len(stopped) > 0 and set(stopped.epochs) <= {1, 3}  # the worker waited for the answer at the rung
    assert set(df.epochs) <= {1, 3, EPOCHS}
    reports = [r for r in read_records(tmp_path / "run" / "trials.jsonl") if r.kind == "report"]
    assert len(reports) == df.epochs.sum() and {r.report.worker for r in reports} <= {"nas-trainer-0", "nas-trainer-1"}
    assert df.attrs["summary"]["reports"] == len(reports)


def test_a_stop_between_rungs_lands_within_one_epoch(ray_local, digits):
    """The median rule decides at every epoch; workers do not wait for it, and still stop by the next one."""
    settings = TrainSettings(epochs=6, device="cpu", threads=1, measure_costs=False)
    ex = RayExecutor(MacroSpace(), digits, settings, workers=2)
    try:
        loop = SearchLoop(RandomSearch(MacroSpace(), seed=1), ex, budget=10,
                          scheduler=make_scheduler("median", max_epochs=6, seed=0, options={"min_samples": 2}))
        loop.run()
    finally:
        ex.shutdown()
    stopped = [r for r in loop.book.records.values() if r.result is not None and r.result.outcome == "STOPPED"]
    assert stopped, "the median rule stopped nothing"
    for record in stopped:
        at = record.decided_at
        assert at <= record.result.epoch <= at + 1 and len(record.result.history) == record.result.epoch


def test_asha_promotion_continues_from_checkpoints_in_the_object_store(ray_local, tmp_path, digits):
    # Which trials a promotion picks follows the order Ray delivers results in; 9 trials make the outcome
    # certain in any order: once all 9 reached rung 1, its top 3 are promoted (a rank r is in the top 1/3
    # once 3r results are in), and of 3 results at rung 3 the best is promoted to the last rung (9 epochs).
    df = nas.search(ToySpace(), "random", budget=9, workers=2, seed=0, data=digits, settings=SETTINGS,
                    train=curve_train, scheduler="asha", scheduler_options={"variant": "promotion"},
                    run_dir=tmp_path / "run")
    assert len(df) == 9 and df.trial_id.is_unique and (df.state == "COMPLETE").all()
    assert (df.epochs == EPOCHS).any() and (df.outcome == "PAUSED").any()
    records = list(read_records(tmp_path / "run" / "trials.jsonl"))
    for tid in df[df.epochs == EPOCHS].trial_id:
        epochs = [r.report.epoch for r in records if r.kind == "report" and r.trial.trial_id == tid]
        assert epochs == list(range(1, EPOCHS + 1))
