"""The loop, the in-process executor, the journal and the Python API (no Ray)."""

from __future__ import annotations

import dataclasses
import json
import os
import threading

import numpy as np
import pytest
import torch

import nas
from nas.api import load_results
from nas.core.space import SearchSpace
from nas.core.types import TrialState
from nas.engine.inprocess import InProcessExecutor
from nas.engine.loop import SearchLoop
from nas.engine.protocol import KeepRule, finished
from nas.monitor.status import format_status, format_summary, run_status
from nas.run.reader import read_journal
from nas.run.store import RunStore
from nas.search_spaces.toy import ToySpace, toy_score
from nas.strategies.evolution import RegularizedEvolution
from nas.strategies.random import RandomSearch
from nas.train.runner import TrialRunner
from nas.train.settings import TrainSettings
from nas.train.simple import scored


class Flaky(SearchSpace):
    """Width 0 raises in build, width 2 makes NaN outputs, width 1 trains fine."""

    def dims(self):
        return {"width": [0, 1, 2], "bias": [True, False]}

    def build(self, arch, task):
        if arch["width"] == 0:
            raise RuntimeError("width 0 cannot be built")
        layers = [torch.nn.Flatten(), torch.nn.Linear(64, task.num_classes, bias=arch["bias"])]
        if arch["width"] == 2:
            layers.append(NaNs())
        return torch.nn.Sequential(*layers)


class NaNs(torch.nn.Module):
    def forward(self, x):
        return x * float("nan")


@pytest.fixture(scope="module")
def digits():
    return nas.load_dataset("digits")


def test_budget_is_met_exactly_and_every_trial_is_journaled(tmp_path, toy_train):
    run = tmp_path / "run"
    strategy = RegularizedEvolution(ToySpace(), population=8, sample_size=3, seed=0)
    executor = InProcessExecutor(ToySpace(), None, train=toy_train, slots=3)
    store = RunStore.create(run, {"space": "toy", "strategy": "evolution"})
    try:
        results = SearchLoop(strategy, executor, budget=37, store=store).run()
    finally:
        store.close()
    assert len(results) == 37
    journaled = list(read_journal(run))
    assert [t.trial_id for t, _ in journaled] == [t.trial_id for t, _ in results]
    assert all(r.score == toy_score(t.arch) for t, r in journaled)


def test_failing_candidates_are_recorded_and_the_search_goes_on(tmp_path, digits):
    df = nas.search(Flaky(), "random", budget=6, executor="inprocess", data=digits, seed=0,
                    settings=TrainSettings(epochs=1), run_dir=tmp_path / "run")
    assert len(df) == 6  # the whole space: random search without repeats
    by_width = {w: group for w, group in df.groupby(df.arch.str.extract(r"width=(\d)")[0])}
    assert (by_width["0"].state == "FAILED").all()
    assert by_width["0"].error.str.contains("width 0 cannot be built").all()
    assert (by_width["2"].state == "FAILED").all()
    assert by_width["2"].error.str.contains("FloatingPointError").all()
    assert (by_width["1"].state == "COMPLETE").all()
    assert len(load_results(tmp_path / "run")) == 6


def test_api_returns_a_dataframe_and_writes_the_best(tmp_path, digits):
    df = nas.search("toy", "evolution", budget=4, executor="inprocess", data=digits, seed=1,
                    strategy_options={"population": 2, "sample_size": 2},
                    settings=TrainSettings(epochs=2), run_dir=tmp_path / "run")
    assert list(df.columns[:6]) == ["trial_id", "arch", "parent", "strategy", "state", "score"]
    assert (df.state == "COMPLETE").all() and df.score.between(0, 1).all()
    assert df.metrics.iloc[0]["epoch"] == 2 and df.worker.notna().all() and df.node.notna().all()
    best = json.loads((tmp_path / "run" / "best.json").read_text())
    assert best["score"] == df.score.max() and best["trial_id"] == int(df.loc[df.score.idxmax(), "trial_id"])
    import hashlib  # best.json names the weights best.pt holds

    assert best["weights_sha256"] == hashlib.sha256((tmp_path / "run" / "best.pt").read_bytes()).hexdigest()
    state = torch.load(tmp_path / "run" / "best.pt", weights_only=False)
    model = ToySpace().build(best["arch"], digits.task)
    model.load_state_dict(state["model"])  # the exported weights fit the exported architecture
    assert df.attrs["run_dir"] == str(tmp_path / "run")


def test_real_training_learns_digits(digits):
    trainer = TrialRunner(digits, TrainSettings(epochs=4, seed=0))
    trial = RandomSearch(ToySpace(), seed=0).trial({"d0": 4, "d1": 0, "d2": 0, "d3": 0, "d4": 0})
    result, ckpt = trainer.run(trial, ToySpace(), None)
    assert result.state is TrialState.COMPLETE, result.error
    assert result.score > 0.85
    assert [h["epoch"] for h in result.history] == [1, 2, 3, 4]
    assert result.history[-1]["train_loss"] < result.history[0]["train_loss"]
    assert ckpt is not None


def test_training_resumes_from_a_checkpoint(digits):
    trainer = TrialRunner(digits, TrainSettings(epochs=2, seed=0))
    space, strategy = ToySpace(), RandomSearch(ToySpace(), seed=0)
    first = strategy.ask()
    r1, ckpt = trainer.run(first, space, None)
    follow = strategy.trial(first.arch, checkpoint_from=first.trial_id, epochs=1)
    r2, _ = trainer.run(follow, space, ckpt)
    assert r2.epoch == 3 and r2.history[0]["epoch"] == 3
    assert r2.history[0]["train_loss"] < r1.history[0]["train_loss"]  # not from scratch


def test_unknown_hparams_fail_the_trial_with_their_names(digits):
    trainer = TrialRunner(digits, TrainSettings(epochs=1))
    trial = RandomSearch(ToySpace(), seed=0).trial({f"d{i}": 0 for i in range(5)}, hparams={"lrr": 0.1})
    result, _ = trainer.run(trial, ToySpace(), None)
    assert result.state is TrialState.FAILED and "unknown hyperparameters ['lrr']" in result.error


def test_too_large_models_fail_cleanly(digits):
    trainer = TrialRunner(digits, TrainSettings(epochs=1, max_params=100))
    result, _ = trainer.run(RandomSearch(ToySpace(), seed=0).ask(), ToySpace(), None)
    assert result.state is TrialState.FAILED and result.failure == "INFEASIBLE"
    assert result.error == "INFEASIBLE: params 3,010 > max_params 100" and result.metrics == {"params": 3010}


def test_strategy_that_stalls_is_an_error(toy_train):
    class Stalls(RandomSearch):
        def ask(self):
            return None

    executor = InProcessExecutor(ToySpace(), None, train=toy_train)
    with pytest.raises(RuntimeError, match="proposed nothing with no trial running"):
        SearchLoop(Stalls(ToySpace()), executor, budget=3).run()


@pytest.mark.parametrize(("asked", "error", "message"), [
    # (a dict was an AttributeError on trial_id deep in the loop; epochs=-3 trained nothing and ended COMPLETE)
    (lambda s: {"d0": 1}, TypeError, r"strategy 'random' asked dict \{'d0': 1\}, not a Trial \(make one with "
                                     r"self.trial\(arch\)\)"),
    (lambda s: s.trial(s.space.sample(s.rng), epochs=-3), ValueError,
     r"strategy 'random' asked trial 0 with epochs=-3; allowed: None \(the run's epochs\) or an integer >= 1"),
    (lambda s: s.trial(s.space.sample(s.rng), epochs=2.5), ValueError, "with epochs=2.5; allowed"),
    (lambda s: nas.Trial(-1, s.space.sample(s.rng)), ValueError,
     r"strategy 'random' asked a trial with id -1; allowed: an integer >= 0"),
])
def test_what_a_strategy_asks_is_checked_before_it_runs(tmp_path, toy_train, asked, error, message):
    class Asks(RandomSearch):
        def ask(self):
            return asked(self)

    executor = InProcessExecutor(ToySpace(), None, train=toy_train)
    with pytest.raises(error, match=message):
        SearchLoop(Asks(ToySpace()), executor, budget=3).run()
    assert executor.free_slots() == 1  # nothing was submitted


class LeavesItsSpace(ToySpace):
    """A space whose own mutate() makes an architecture its dims() do not allow while ``broken`` (a sample() that
    does is refused before anything is made: tests/test_space.py)."""

    broken = True

    def mutate(self, arch, rng):
        child = super().mutate(arch, rng)
        return {**child, "d0": 99} if self.broken else child


def test_a_proposal_outside_the_space_stops_the_search_before_it_is_journaled_and_the_run_resumes(tmp_path):
    """(Each became a FAILED trial of kind ERROR, journaled, and the run could never be resumed: "its journal holds
    trial 4, which is not in space".)"""
    kw = dict(budget=8, executor="inprocess", data=None, train=scored(toy_score), seed=0, run_dir=tmp_path / "run",
              progress=False, strategy_options={"population": 3, "sample_size": 2})
    with pytest.raises(nas.InvalidSpace, match=r"strategy 'evolution' proposed trial 3 outside its space "
                                               r"LeavesItsSpace \(decision 'd0' has value 99; allowed: \[0, 1, 2, 3, "
                                               r"4\]\): the space's sample\(\) or mutate\(\), or the strategy, makes"):
        nas.search(LeavesItsSpace(), "evolution", **kw)
    assert b'"d0":99' not in (tmp_path / "run" / "trials.jsonl").read_bytes()
    LeavesItsSpace.broken = False
    try:
        df = nas.search(LeavesItsSpace(), "evolution", resume=True, **kw)
    finally:
        LeavesItsSpace.broken = True
    assert len(df) == 8 and (df.state == "COMPLETE").all()


def test_a_promoted_trials_failed_continuation_keeps_what_it_measured_before(tmp_path):
    """(The FAILED continuation replaced the trial's paused result: the run's best, 0.25, vanished from the results,
    `nas status` and `nas best`, while best.json kept naming it.)"""
    def train(ctx):
        state = ctx.checkpoint.load()
        start = state["epoch"] if state else 0
        if start > 0:
            raise RuntimeError("transient failure in the continued segment")
        for e in range(start + 1, ctx.epochs + 1):
            ctx.checkpoint.save({"epoch": e})
            if ctx.report(epoch=e, val_acc=0.05 * e + 0.1 * (ctx.trial.trial_id % 3)):
                return

    run = tmp_path / "run"
    df = nas.search(ToySpace(), "random", budget=9, executor="inprocess", data=None, train=train, seed=0,
                    run_dir=run, progress=False, epochs=9, scheduler="asha",
                    scheduler_options={"variant": "promotion", "grace_period": 1, "eta": 3})
    continued = df[df.error.fillna("").str.startswith("its continuation failed (ERROR): RuntimeError: transient")]
    assert len(continued) and (continued.outcome == "STOPPED").all() and continued.score.notna().all()
    best = df.loc[df.score.idxmax()]
    assert int(best.trial_id) in set(continued.trial_id)  # (the trials promoted were the best ones)
    assert json.loads((run / "best.json").read_text())["trial_id"] == int(best.trial_id)
    columns = ["trial_id", "outcome", "score", "epochs", "error"]
    assert load_results(run)[columns].equals(df[columns])
    resumed = nas.search(ToySpace(), "random", budget=12, executor="inprocess", data=None, train=train, seed=0,
                         run_dir=run, progress=False, epochs=9, scheduler="asha", resume=True,
                         scheduler_options={"variant": "promotion", "grace_period": 1, "eta": 3})
    assert resumed[columns].head(len(df)).equals(df[columns])  # (the journal replays: the scheduler heard the same)
    # (no failure count said so: "finished 12 trials (0 failed)" where every promotion had failed)
    n = len(resumed[resumed.error.fillna("").str.startswith("its continuation failed")])
    said = (f"{n} promoted trials failed to continue and kept their earlier score (the errors: nas results {run} "
            "--format json)")
    status = run_status(run)
    assert n >= 2 and f"note      {said}" in format_status(status).splitlines()
    assert format_summary(status).splitlines()[1] == said


class NumpyChoices(RandomSearch):
    """Proposes architectures whose values are numpy's numbers (as ``rng.choice`` over options gives them)."""

    def ask(self):
        trial = super().ask()
        return dataclasses.replace(trial, arch={k: np.int64(v) for k, v in trial.arch.items()})


def test_numpy_numbers_in_a_proposal_are_journaled_as_numbers_and_the_run_resumes(tmp_path):
    """(They equal the options, so they passed; the journal wrote them as text, "3", and the resume refused: "not in
    space ... value '3'".)"""
    kw = dict(budget=4, executor="inprocess", data=None, train=scored(toy_score), seed=0, run_dir=tmp_path / "run",
              progress=False)
    nas.search(ToySpace(), NumpyChoices(ToySpace(), seed=0), **kw)
    assert b'"d0":"' not in (tmp_path / "run" / "trials.jsonl").read_bytes()
    df = nas.search(ToySpace(), NumpyChoices(ToySpace(), seed=0), resume=True, **{**kw, "budget": 6})
    assert len(df) == 6 and (df.state == "COMPLETE").all()


class Raising(nas.Callback):
    def __init__(self, hook, error):
        self.hook, self.error = hook, error

    def on_start(self, status):
        if self.hook == "on_start":
            raise self.error

    def on_result(self, status, trial, result):
        if self.hook == "on_result":
            raise self.error


@pytest.mark.parametrize(("hook", "error", "state"), [
    ("on_start", RuntimeError("display broken"), "failed"),  # (status.json said "running": `nas status`, "died")
    ("on_result", KeyboardInterrupt(), "interrupted"),  # (a Ctrl-C in Python with no stop signal: "failed")
])
def test_a_search_ended_by_a_callback_or_a_ctrl_c_says_how_in_its_status(tmp_path, hook, error, state):
    from nas.monitor.status import run_status

    with pytest.raises(type(error)):
        nas.search(ToySpace(), "random", budget=4, executor="inprocess", data=None, train=scored(toy_score),
                   run_dir=tmp_path / "run", progress=False, callbacks=[Raising(hook, error)])
    assert json.loads((tmp_path / "run" / "status.json").read_text())["state"] == state
    assert run_status(tmp_path / "run")["state"] == state
    df = nas.search(ToySpace(), "random", budget=4, executor="inprocess", data=None, train=scored(toy_score),
                    run_dir=tmp_path / "run", progress=False, resume=True)
    assert len(df) == 4


class CannotRun(SearchSpace):
    """Models that cannot run on the task at all (``how``): a first layer of another width, or nothing to train."""

    def __init__(self, how="width"):
        self.how = how

    def dims(self):
        return {"h": [8, 16]}

    def build(self, arch, task):
        if self.how == "params":
            return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Identity())
        with torch.device("meta" if self.how == "meta" else "cpu"):
            return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(65 if self.how == "width" else 64,
                                                                           task.num_classes))


@pytest.mark.parametrize(("how", "measure", "error"), [
    ("width", False, r"the model of \{'h': \d+\} cannot run on the task's input \(a batch of shape \(\d+, 1, 8, "
                     r"8\), torch.float32, on cpu\): RuntimeError: mat1 and mat2 shapes cannot be multiplied"),
    # (the costs, measured first at batch 1, failed it as ERROR: with the defaults the whole budget ran)
    ("width", True, r"the model of \{'h': \d+\} cannot run on the task's input \(an example of shape \(1, 8, 8\), "
                    r"torch.float32; its costs are measured before it trains\): RuntimeError: mat1 and mat2"),
    ("meta", True, r"the model of \{'h': \d+\} cannot be moved to cpu: NotImplementedError: Cannot copy out of meta"),
    ("meta", False, r"the model of \{'h': \d+\} cannot be moved to cpu"),
    ("params", False, r"the model of \{'h': \d+\} has no parameters to train"),
])
def test_models_that_cannot_run_on_the_task_fail_as_invalid_space_and_stop_the_search(tmp_path, digits, how, measure,
                                                                                       error):
    """(They failed every trial as ERROR, so the stop after five broken builds never came: the whole budget ran.)"""
    with pytest.raises(nas.InvalidSpace, match=r"the space's model could not be built or run for each of the first 5 "
                                               r"trials, so the "
                                               rf"search stops \(fix the space, then resume\): {error}"):
        nas.search(CannotRun(how), "random", budget=12, executor="inprocess", data=digits, seed=0,
                   run_dir=tmp_path / "run", progress=False,
                   settings=TrainSettings(epochs=1, measure_costs=measure, cost_repeats=1))
    assert set(nas.load_results(tmp_path / "run").failure) == {"INVALID_SPACE"}


def test_torchs_cpu_allocation_failure_is_an_oom():
    from nas.core.types import FailureKind
    from nas.train.runner import failure_kind

    e = RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried "
                     "to allocate 4000000000000 bytes. Error code 12 (Cannot allocate memory)")
    assert failure_kind(e) is FailureKind.OOM and failure_kind(RuntimeError("other")) is FailureKind.ERROR


@pytest.mark.parametrize("budget", [0, -1, 1.5, True])
def test_bad_budget(budget, toy_train):
    executor = InProcessExecutor(ToySpace(), None, train=toy_train)
    with pytest.raises(ValueError, match="budget must be an integer >= 1"):
        SearchLoop(RandomSearch(ToySpace()), executor, budget=budget)


def test_dataset_shape_errors_are_clear():
    with pytest.raises(ValueError, match=r"y must have shape \(10,\) to match x"):
        nas.Dataset.from_arrays(np.zeros((10, 4)), np.zeros(9))
    with pytest.raises(ValueError, match=r"unknown dataset 'cifar' \(did you mean 'cifar10'\?\); known: digits, "
                       "synthetic"):
        nas.load_dataset("cifar")


def test_a_scoring_function_turns_non_finite_scores_into_failures():
    runner = TrialRunner(None, train=scored(lambda arch: float("nan")))
    result, _ = runner.run(RandomSearch(ToySpace(), seed=0).ask(), ToySpace(), None)
    assert result.state is TrialState.FAILED and result.failure == "NAN" and "val_acc became nan" in result.error


def run_next(executor):
    """Poll the in-process executor until its trial finishes (one step per poll): (kinds seen, result)."""
    kinds = []
    while True:
        events = executor.poll()
        kinds += [e.kind.value for e in events]
        if done := finished(events):
            return kinds, done[0][1]


def test_inprocess_checkpoint_passing(digits):
    executor = InProcessExecutor(ToySpace(), digits, TrainSettings(epochs=1))
    s = RandomSearch(ToySpace(), seed=0)
    parent = s.ask()
    executor.submit(parent, keep=KeepRule(save=True))
    kinds, r1 = run_next(executor)
    assert kinds == ["started", "report", "finished"]
    child = s.trial(parent.arch, checkpoint_from=parent.trial_id, epochs=1)
    executor.submit(child, keep=KeepRule())
    _, r2 = run_next(executor)
    assert r1.epoch == 1 and r2.epoch == 2
    missing = s.trial(parent.arch, checkpoint_from=12345)
    executor.submit(missing, keep=KeepRule())
    _, r3 = run_next(executor)
    assert r3.state is TrialState.FAILED and "no checkpoint is kept for trial 12345" in r3.error
    assert r3.failure == "CHECKPOINT_MISSING"


def test_training_function_objects_work_with_the_api(tmp_path):
    df = nas.search(ToySpace(), "random", budget=5, executor="inprocess", seed=0,
                    data=None, train=scored(toy_score), run_dir=tmp_path / "r")
    assert len(df) == 5


def test_run_files_are_readable_like_any_new_file(tmp_path, toy_train):
    import os
    import stat

    nas.search(ToySpace(), "random", budget=2, executor="inprocess", train=toy_train, run_dir=tmp_path / "r")
    umask = os.umask(0)
    os.umask(umask)
    for name in ("run.json", "snapshot.json", "best.json", "status.json"):
        assert stat.S_IMODE((tmp_path / "r" / name).stat().st_mode) == 0o666 & ~umask


def test_an_inprocess_trial_that_never_reports_leaves_poll_to_its_timeout(toy_space):
    """(``poll`` waited for the trial's next message without a limit: a trial that never reported kept a time budget
    from ending the search, forever.) What happened before the wait comes back; the next poll waits on."""
    release = threading.Event()

    def stuck(ctx):
        release.wait()
        ctx.report(epoch=1, val_acc=0.5)

    executor = InProcessExecutor(toy_space, None, train=stuck)
    executor.submit(RandomSearch(toy_space, seed=0).ask(), keep=KeepRule())
    try:
        assert [e.kind.value for e in executor.poll(timeout=0.05)] == ["started"]
        assert executor.poll(timeout=0.05) == [] and executor.in_flight() == 1
    finally:
        release.set()
    assert [e.kind.value for e in executor.poll()] == ["report"]
    assert [e.kind.value for e in executor.poll()] == ["finished"] and executor.in_flight() == 0


def test_a_time_budget_ends_an_inprocess_search_whose_trial_never_reports(tmp_path, toy_space):
    release = threading.Event()

    def stuck(ctx):
        release.wait()

    try:
        df = nas.search(toy_space, "random", budget=3, time_budget=0.2, executor="inprocess", data=None, train=stuck,
                        run_dir=tmp_path / "r", progress=False)
    finally:
        release.set()
    assert len(df) == 0 and read_journal(tmp_path / "r") == []


def test_a_training_function_cannot_change_the_search_around_it(tmp_path, monkeypatch, digits):
    """In-process, a training function that wrote into ``ctx.trial.arch`` changed the strategy's own record
    (evolution's mutate then failed: "tuple.index(x): x not in tuple"); one that changed the working folder moved
    a relative run directory (the search failed writing best.json: the run's path is absolute now); one that set
    torch's default dtype to float64 failed every later trial ("mat1 and mat2 must have the same dtype") and left
    the caller in float64."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").mkdir()

    class Linear(SearchSpace):
        def dims(self):
            return {"width": [4, 8, 16], "bias": [True, False]}

        def build(self, arch, task):
            return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, arch["width"], bias=arch["bias"]),
                                       torch.nn.ReLU(), torch.nn.Linear(arch["width"], task.num_classes))

    def careless(ctx):
        ctx.trial.arch["width"] = 999
        os.chdir(tmp_path / "elsewhere")
        torch.set_default_dtype(torch.float64)
        x, y = next(iter(ctx.data.train_batches(16)))
        ctx.report(epoch=1, val_acc=-torch.nn.functional.cross_entropy(ctx.model(x), y).item())

    df = nas.search(Linear(), "evolution", budget=6, executor="inprocess", seed=0, data=digits, train=careless,
                    strategy_options={"population": 3, "sample_size": 2}, settings=TrainSettings(epochs=1),
                    measure_costs=False, run_dir="run", progress=False)
    assert (df["state"] == "COMPLETE").all() and len(df) == 6
    assert {t.arch["width"] for t, _ in read_journal(tmp_path / "run")} <= {4, 8, 16}
    assert torch.get_default_dtype() == torch.float32
    os.chdir(tmp_path)  # (the working folder is the training function's to change: the run's path does not follow it)


def docs_train(ctx):
    """docs/python-api.md's training function, as written there."""
    opt = torch.optim.SGD(ctx.model.parameters(), lr=ctx.hparams["lr"], momentum=0.9)
    start = 0
    if (state := ctx.checkpoint.load()) is not None:
        ctx.model.load_state_dict(state["model"])
        start = state["epoch"]
    for epoch in range(start + 1, start + ctx.epochs + 1):
        ctx.model.train()
        for x, y in ctx.data.train_batches(ctx.hparams["batch_size"]):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ctx.model(x), y).backward()
            opt.step()
        val_loss, val_acc = ctx.evaluate()
        if ctx.report(epoch=epoch, val_acc=val_acc, val_loss=val_loss):
            break


def restarting_train(ctx):
    """The same, as the docs wrote it before: every continuation trains from scratch, from epoch 1."""
    ctx.checkpoint.load = lambda: None
    docs_train(ctx)


def test_the_docs_training_function_continues_a_promotion_and_one_that_restarts_is_warned_of(tmp_path, digits,
                                                                                            caplog):
    """(The docs' function trained each continuation from scratch, reporting from epoch 1: promoted trials ended
    COMPLETE at epoch 2, none reached the rungs at 3 and 9, and nothing said so.)"""
    kw = dict(budget=12, executor="inprocess", data=digits, seed=0, epochs=9, scheduler="asha", progress=False,
              scheduler_options={"variant": "promotion"}, settings=TrainSettings(measure_costs=False, batch_size=256))
    with caplog.at_level("WARNING", logger="nas.engine.loop"):
        df = nas.search(ToySpace(), "random", train=docs_train, run_dir=tmp_path / "a", **kw)
    assert df.epochs.max() >= 3 and not [r for r in caplog.records if "was continued from epoch" in r.message]
    promoted = df[df.history.map(len) > 1]
    assert len(promoted) and all([h["epoch"] for h in hist] == list(range(1, len(hist) + 1))
                                 for hist in promoted.history)
    caplog.clear()
    with caplog.at_level("WARNING", logger="nas.engine.loop"):
        nas.search(ToySpace(), "random", train=restarting_train, run_dir=tmp_path / "b", **kw)
    said = [r.message for r in caplog.records if "was continued from epoch" in r.message]
    assert len(said) == 1 and "reported epoch 1: a training function goes on from its checkpoint" in said[0]
