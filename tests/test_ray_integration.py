"""Integration on a real local Ray cluster (2 CPUs): real trainer actors, real PyTorch training."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import ray

import nas
from nas.core.space import SearchSpace
from nas.engine.protocol import KeepRule, finished
from nas.engine.ray_pool import RayExecutor
from nas.run.reader import read_journal
from nas.search_spaces.toy import ToySpace, toy_score
from nas.strategies.random import RandomSearch
from nas.train.data import Dataset
from nas.train.settings import TrainSettings
from nas.train.simple import scored

pytestmark = pytest.mark.ray

# The spaces below live in this test module, which Ray's workers cannot import: ship them by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_small_real_search_with_two_actors(ray_local, tmp_path):
    df = nas.search("macro", "evolution", budget=6, workers=2, seed=0, run_dir=tmp_path / "run",
                    strategy_options={"population": 3, "sample_size": 2},
                    settings=TrainSettings(epochs=1, seed=0))
    assert len(df) == 6 and (df.state == "COMPLETE").all()
    assert df.score.between(0.0, 1.0).all()
    assert set(df.worker) <= {"nas-trainer-0", "nas-trainer-1"} and df.worker.nunique() == 2
    journaled = {t.trial_id for t, _ in read_journal(tmp_path / "run")}
    assert journaled == set(df.trial_id)
    assert (tmp_path / "run" / "best.pt").stat().st_size > 0
    assert df.attrs["summary"]["utilization"] > 0


class SometimesBroken(SearchSpace):
    def dims(self):
        return {"ok": [True, False], "x": [0, 1, 2]}

    def build(self, arch, task):
        import torch

        if not arch["ok"]:
            raise ValueError("this candidate is broken")
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, task.num_classes))


def test_failures_are_recorded_and_the_search_finishes(ray_local, tmp_path):
    df = nas.search(SometimesBroken(), "random", budget=6, workers=2, seed=0, run_dir=tmp_path / "run",
                    settings=TrainSettings(epochs=1))
    assert len(df) == 6
    broken = df[df.arch.str.contains("ok=False")]
    assert len(broken) == 3 and (broken.state == "FAILED").all()
    assert broken.error.str.contains("this candidate is broken").all()
    assert (df[df.arch.str.contains("ok=True")].state == "COMPLETE").all()


def test_actors_are_named_and_use_their_cpu_share(ray_local):
    ex = RayExecutor(ToySpace(), nas.load_dataset("digits"), workers=2, namespace="nas-test-names")
    try:
        infos = ray.get([ex.actor(i).info.remote() for i in range(2)])
        assert [i["name"] for i in infos] == ["nas-trainer-0", "nas-trainer-1"]
        assert all(i["threads"] == 1 for i in infos)
        assert ray.get_actor("nas-trainer-1", namespace="nas-test-names") is not None
    finally:
        ex.shutdown()


class BlocksOnFirstAttempt:
    """Its first trial signals that it runs, then blocks until the worker is killed; the retry (marker present)
    reports the toy score at once."""

    def __init__(self, marker, started):
        self.marker, self.started = marker, started

    def __call__(self, ctx):
        if not os.path.exists(self.marker):
            open(self.marker, "w").close()
            with open(self.started, "w") as f:  # the test's Signal: it kills this worker now
                f.write(f"{os.getpid()}\n")
            threading.Event().wait()  # forever: only the kill ends this attempt
        ctx.report(epoch=1, val_acc=toy_score(ctx.trial.arch))


def test_worker_killed_mid_trial_is_replaced_and_the_trial_retried(ray_local, tmp_path, signals):
    marker, started = str(tmp_path / "attempted"), signals("started")
    ex = RayExecutor(ToySpace(), None, workers=1, max_retries=1, train=BlocksOnFirstAttempt(marker, started.path))
    try:
        trial = RandomSearch(ToySpace(), seed=0).ask()
        ex.submit(trial, keep=KeepRule())
        events = ex.poll(timeout=0)
        assert finished(events) == []
        pid = int(started.wait())  # the trial is running, blocked, in the worker's process
        assert pid == ray.get(ex.actor(0).info.remote())["pid"]
        ray.kill(ex.actor(0))
        while not finished(events):
            events += ex.poll(timeout=30)
        [(t, r)] = finished(events)
        assert t.trial_id == trial.trial_id and r.ok and r.score == toy_score(trial.arch)
        assert ex.restarts == 1
        # it ran, went back to waiting when its worker died, ran again on the replacement, reported, finished
        assert [e.kind.value for e in events] == ["started", "requeued", "started", "report", "finished"]
    finally:
        ex.shutdown()


def test_cuda_without_a_gpu_request_is_refused(ray_local):
    with pytest.raises(ValueError, match="device='cuda' needs a GPU per trial"):
        RayExecutor(ToySpace(), nas.load_dataset("digits"), TrainSettings(device="cuda"), workers=1)


def test_actors_that_cannot_start_fail_the_search_with_their_error(ray_local):
    tabular = Dataset("tabular", np.zeros((8, 4), np.float32), np.arange(8) % 2, np.zeros((4, 4), np.float32),
                      np.arange(4) % 2)  # flips on inputs that are no images: each worker refuses to start
    with pytest.raises(RuntimeError, match="(?s)trainer actors failed to start: .*needs image inputs"):
        RayExecutor(ToySpace(), tabular, TrainSettings(flip=True), workers=1)


def test_too_many_workers_for_the_cluster(ray_local, tmp_path):
    with pytest.raises(ValueError, match="3 workers x 1 CPUs need 3 CPUs, the Ray cluster has 2"):
        RayExecutor(ToySpace(), None, workers=3)
    with pytest.raises(ValueError, match="3 workers x 1 CPUs need 3 CPUs, the Ray cluster has 2"):  # (a search:
        nas.search(ToySpace(), "random", budget=2, workers=3, data=None, train=scored(toy_score),  # its new run
                   run_dir=tmp_path / "run")  # is taken back, so the same folder starts it again)
    assert list(tmp_path.iterdir()) == []


def test_gpus_requested_without_gpus_fall_back_to_cpu(ray_local, caplog):
    ex = RayExecutor(ToySpace(), None, workers=1, gpus_per_trial=0.25,
                     train=scored(toy_score))
    try:
        assert ex.fallback_to_cpu and ex.gpus_per_trial == 0.0
        assert "no GPU in the Ray cluster" in caplog.text
    finally:
        ex.shutdown()


def test_cli_search_subprocess(tmp_path):
    """The README's command shape, end to end in a fresh process that starts its own Ray."""
    proc = subprocess.run(
        [sys.executable, "-m", "nas.cli", "search", "--space", "macro", "--strategy", "evolution",
         "--workers", "2", "--budget", "4", "--epochs", "1", "--run-dir", str(tmp_path / "run"),
         "-o", "population=2", "-o", "sample_size=2"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "finished 4 trials (0 failed)" in proc.stdout and "best val_acc" in proc.stdout
    assert "4/4 [" in proc.stderr  # the progress display's last line in a log


class WaitsForGo:
    """Trial 0 says it started on the ``started`` FIFO (a :class:`tests.conftest.Signal`), then waits until the
    test writes a line into the ``go`` FIFO; the others report at once."""

    def __init__(self, started, go):
        self.started, self.go = started, go

    def __call__(self, ctx):
        if ctx.trial.trial_id == 0:
            with open(self.started, "w") as f:  # waits until the test reads
                f.write("0\n")
            with open(self.go) as f:  # waits until the test opens it to write, then for its line
                f.readline()
        ctx.report(epoch=1, val_acc=toy_score(ctx.trial.arch))


def go(path):
    """Let trial 0 of :class:`WaitsForGo` go on (it opens ``path`` to read right after its started signal)."""
    with open(path, "w") as f:
        f.write("go\n")


def test_the_actor_says_when_a_trial_starts_and_a_prefetched_one_waits_queued(ray_local, tmp_path, signals):
    started, gate = signals("started"), tmp_path / "go"
    os.mkfifo(gate)
    ex = RayExecutor(ToySpace(), None, workers=1, prefetch=True, namespace="nas-test-started",
                     train=WaitsForGo(started.path, str(gate)))
    try:
        strategy = RandomSearch(ToySpace(), seed=0)
        first, second = strategy.ask(), strategy.ask()
        ex.submit(first, keep=KeepRule())
        assert ex.free_slots() == 1  # prefetch: one more may queue behind the running one
        ex.submit(second, keep=KeepRule())
        events = []
        while not events:
            events = ex.poll(timeout=30)
        assert [(e.kind.value, e.trial.trial_id) for e in events] == [("started", 0)]
        assert events[0].worker == "nas-trainer-0" and events[0].time is not None
        # "started" is the driver's (the worker was idle); the actor names its trial once its training thread took
        # it, before the training function runs, which says so
        assert started.wait() == "0"
        current = ray.get(ex.actor(0).info.remote())["current"]
        assert current["trial_id"] == 0 and current["arch"] == ToySpace().format(first.arch)
        assert ex.poll(timeout=0.5) == []  # trial 1 is queued behind trial 0: it has not started
        go(gate)
        while len(events) < 6:
            events += ex.poll(timeout=30)
        assert [(e.kind.value, e.trial.trial_id) for e in events] == [
            ("started", 0), ("report", 0), ("finished", 0), ("started", 1), ("report", 1), ("finished", 1)]
        assert ray.get(ex.actor(0).info.remote())["current"] is None
    finally:
        ex.shutdown()


def test_a_cancelled_queued_trial_ends_cancelled_without_training_and_the_worker_goes_on(ray_local, tmp_path,
                                                                                          signals):
    """The actor hears the cancel of the trial queued behind its running one: that trial never trains (no report)
    and ends CANCELLED in its turn; the trial sent after it runs as usual."""
    from nas.core.types import Outcome

    started, gate = signals("started"), tmp_path / "go"
    os.mkfifo(gate)
    ex = RayExecutor(ToySpace(), None, workers=1, prefetch=True, namespace="nas-test-cancel",
                     train=WaitsForGo(started.path, str(gate)))
    try:
        strategy = RandomSearch(ToySpace(), seed=0)
        first, second, third = strategy.ask(), strategy.ask(), strategy.ask()
        ex.submit(first, keep=KeepRule())
        ex.submit(second, keep=KeepRule())
        ex.stop(second.trial_id, Outcome.CANCELLED)
        # the cancel is in before the first trial may end: the monitor group runs one call at a time, in order
        ray.get(ex.actor(0).info.remote())
        assert started.wait() == "0"
        go(gate)
        events = []
        while sum(e.kind.value == "finished" for e in events) < 2:
            events += ex.poll(timeout=30)
        ex.submit(third, keep=KeepRule())
        while sum(e.kind.value == "finished" for e in events) < 3:
            events += ex.poll(timeout=30)
        assert [(e.kind.value, e.trial.trial_id) for e in events] == [
            ("started", 0), ("report", 0), ("finished", 0), ("finished", 1),
            ("started", 2), ("report", 2), ("finished", 2)]
        assert [e.result.outcome for e in events if e.result is not None] == [
            Outcome.COMPLETE, Outcome.CANCELLED, Outcome.COMPLETE]
    finally:
        ex.shutdown()


def test_many_light_actors_finish_their_trials_without_torch(ray_local):
    """16 light actors (0.03 CPU each, no torch), 500 trivial trials; the scale version is
    ``nas bench ray-poll`` (64 actors, 10,000 trials)."""
    from nas.core.types import Trial
    from nas.train.simple import noop

    ex = RayExecutor(None, None, None, workers=16, train=noop, cpus_per_trial=0.03,
                     namespace="nas-test-light")
    try:
        infos = ray.get([ex.actor(i).info.remote() for i in range(16)])
        assert all(i["threads"] is None for i in infos)  # torch never loaded in a light actor
        submitted, log, most = 0, [], 0
        while sum(kind == "finished" for kind, _ in log) < 500:
            while submitted < 500 and ex.free_slots():
                ex.submit(Trial(submitted, {"x": submitted}), keep=KeepRule())
                submitted += 1
            most = max(most, ex.in_flight())
            log += [(e.kind.value, e.trial.trial_id) for e in ex.poll(timeout=30) if e.result is None or e.result.ok]
        assert sorted(i for kind, i in log if kind == "finished") == list(range(500))
        assert sorted(i for kind, i in log if kind == "started") == list(range(500))
        assert all(log.index(("started", i)) < log.index(("finished", i)) for i in range(500))
        assert ex.prefetch.on and 16 < most <= 32  # trivial trials: one queued behind each running one
    finally:
        ex.shutdown()
