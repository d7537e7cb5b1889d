"""Trials that report as they train: the ctx contract, schedulers in the loop (stop, pause, promote),
journaled reports and their replay on resume, constraints and objectives. In-process (deterministic); the
Ray path is in test_reporting_ray.py."""

from __future__ import annotations

import collections
import enum
import math
import sys

import numpy as np
import pytest

import nas
from nas.core.scheduler import make_scheduler
from nas.engine.inprocess import InProcessExecutor
from nas.engine.loop import SearchLoop
from nas.engine.protocol import EventKind
from nas.run.journal import read_records
from nas.run.store import RunStore
from nas.search_spaces.toy import ToySpace, toy_score
from nas.strategies.random import RandomSearch
from nas.train.settings import TrainSettings
from tests.helpers import CrashAtEvent, saving_curve

EPOCHS = 9


@pytest.fixture(scope="module")
def digits():
    return nas.load_dataset("digits")


def quality(arch):
    return math.exp(toy_score(arch) / 10)  # in (0, 1], 1 at the space's optimum


def curve_train(ctx):
    """A learning curve that rises with the epochs towards the architecture's quality; it continues
    where a checkpoint left off (a promotion)."""
    state = ctx.checkpoint.load()
    start = int(state["epoch"]) if state else 0
    for epoch in range(start + 1, start + ctx.epochs + 1):
        if ctx.report(epoch=epoch, val_acc=quality(ctx.trial.arch) * (1 - 0.5**epoch), loss=1.0 / epoch):
            return


class Crash(BaseException):
    """Stands for the driver dying mid-search: nothing in the platform catches it."""


def search(tmp_path, digits, *, train=curve_train, scheduler="none", options=None, budget=20, resume=False,
           strategy="evolution", settings=None, objectives=("val_acc",), **kw):
    settings = settings or TrainSettings(epochs=EPOCHS, device="cpu", threads=1, measure_costs=False,
                                         objectives=tuple(objectives))
    ex = InProcessExecutor(ToySpace(), digits, settings, slots=2,
                           train=train)
    return nas.search(ToySpace(), strategy, budget=budget, executor=ex, seed=0, settings=settings,
                      strategy_options={"population": 6, "sample_size": 3} if strategy == "evolution" else {},
                      run_dir=tmp_path / "run", resume=resume, scheduler=scheduler,
                      scheduler_options=options or {}, **kw)


def test_every_epoch_is_reported_journaled_and_ends_in_the_result(tmp_path, digits):
    df = search(tmp_path, digits, budget=4)
    assert (df.epochs == EPOCHS).all() and (df.outcome == "COMPLETE").all()
    reports = [r for r in read_records(tmp_path / "run" / "trials.jsonl") if r.kind == "report"]
    assert len(reports) == 4 * EPOCHS
    first = [r.report for r in reports if r.trial.trial_id == 0]
    assert [r.epoch for r in first] == list(range(1, EPOCHS + 1))
    assert first[-1].score == pytest.approx(df.set_index("trial_id").score[0])
    assert [h["epoch"] for h in df.set_index("trial_id").history[0]] == list(range(1, EPOCHS + 1))


def test_asha_stopping_stops_poor_trials_at_a_rung_and_trains_fewer_epochs(tmp_path, digits):
    df = search(tmp_path, digits, scheduler="asha", options={"eta": 3})
    stopped = df[df.outcome == "STOPPED"]
    assert len(stopped) > 0 and set(stopped.epochs) <= {1, 3}  # stopped at a rung, not an epoch later
    assert (df[df.outcome == "COMPLETE"].epochs == EPOCHS).all()
    assert df.epochs.sum() < 0.6 * len(df) * EPOCHS
    best = df.loc[df.score.idxmax()]
    assert best.epochs == EPOCHS and best.outcome == "COMPLETE"  # the winner trained in full
    summary = df.attrs["summary"]
    assert summary["decisions"]["STOP"] == len(stopped) and summary["reports"] == df.epochs.sum()


def test_median_rule_stops_within_an_epoch_of_its_decision(tmp_path, digits):
    df = search(tmp_path, digits, scheduler="median", options={"grace_period": 2}, budget=12)
    stopped = df[df.outcome == "STOPPED"]
    assert len(stopped) > 0 and (stopped.epochs < EPOCHS).all()


def test_asha_promotion_pauses_with_checkpoints_and_continues_them(tmp_path, digits):
    df = search(tmp_path, digits, scheduler="asha", options={"eta": 3, "variant": "promotion"}, budget=12)
    assert len(df) == 12 and df.trial_id.is_unique
    paused = df[df.outcome == "PAUSED"]
    assert len(paused) > 0 and set(paused.epochs) <= {1, 3}
    full = df[df.epochs == EPOCHS]
    assert len(full) >= 1 and (full.outcome == "COMPLETE").all()  # promoted 1 -> 3 -> 9 from their checkpoints
    records = list(read_records(tmp_path / "run" / "trials.jsonl"))
    tid = int(full.trial_id.iloc[0])
    continued = [r.trial for r in records if r.kind == "submit" and r.trial.trial_id == tid][1:]
    assert [t.checkpoint_from for t in continued] == [tid, tid] and [t.epochs for t in continued] == [2, 6]
    reports = [r.report.epoch for r in records if r.kind == "report" and r.trial.trial_id == tid]
    assert reports == list(range(1, EPOCHS + 1))  # each continuation went on from its checkpoint's epoch
    assert (tmp_path / "run" / "checkpoints").is_dir()


def test_asha_promotion_without_data_continues_each_trial_to_the_top_rung():
    """A training function run without data (data=None) got no checkpoint back: a promoted trial started again at
    epoch 1 and ended COMPLETE at epoch 2, so no trial reached rung 3, 9 or 27."""
    executor = InProcessExecutor(ToySpace(), None, train=saving_curve)
    loop = SearchLoop(RandomSearch(ToySpace(), seed=0), executor, budget=60,
                      scheduler=make_scheduler("asha", max_epochs=27, seed=0, options={"variant": "promotion"}))
    loop.run()
    results = [r.result for r in loop.book.records.values()]
    assert {r.epoch for r in results} == {1, 3, 9, 27}
    top = [r for r in results if r.epoch == 27]
    assert top and all(r.outcome.value == "COMPLETE" for r in top)
    assert all([h["epoch"] for h in r.history] == list(range(1, 28)) for r in top)  # each run from the last one's


@pytest.mark.parametrize("scheduler", ["asha", "hyperband"])
def test_a_paused_trial_keeps_its_checkpoint_past_the_bound_while_ended_ones_go(tmp_path, scheduler):
    """The executor keeps at most `keep` checkpoints. They went oldest first, so a long run's late promotions (a
    rung grown past a paused trial into its top third) failed as CHECKPOINT_MISSING: 18 of 300 trials here (10 with
    hyperband). Now the scheduler names the one to drop: an ended trial's, else the paused one ranked lowest. (20
    kept, not 16, since promoted trials go on from their checkpoints to rungs 3 and 9: with 16, every slot held a
    paused trial and the lowest of them, 52nd of 123 in rung 1, was promoted later.)"""
    executor = InProcessExecutor(ToySpace(), None, train=saving_curve)
    executor.checkpoints.keep = 20
    store = RunStore.create(tmp_path / "run", {"space": "toy", "budget": 300})
    loop = SearchLoop(RandomSearch(ToySpace(), seed=0), executor, budget=300, store=store,
                      scheduler=make_scheduler(scheduler, max_epochs=27, seed=0, options={"variant": "promotion"}))
    loop.run()
    store.close()
    results = [r.result for r in loop.book.records.values()]
    assert len(results) == 300 and all(r.ok for r in results)  # no promotion lost its checkpoint
    promoted = [t for t, r in loop.book.records.items() if r.runs > 1]
    assert len(promoted) > 40
    kept = {int(p.stem) for p in (tmp_path / "run" / "checkpoints").glob("*.pt")}
    assert kept == {t for t in loop.book.records if t in executor.checkpoints} and len(kept) == 20  # (the same)


@pytest.mark.parametrize("at", [5, 23])
def test_a_crash_mid_training_resumes_to_the_uninterrupted_run(tmp_path, digits, at):
    options = {"eta": 3, "variant": "promotion"}
    reference = search(tmp_path / "ref", digits, scheduler="asha", options=options, budget=10)
    with pytest.raises(Crash):
        search(tmp_path, digits, scheduler="asha", options=options, budget=10,
               callbacks=[CrashAtEvent(EventKind.REPORT, at, Crash)])  # (the driver dies at the at-th report)
    df = search(tmp_path, digits, scheduler="asha", options=options, budget=10, resume=True)
    cols = ["trial_id", "arch", "score", "epochs", "outcome"]
    assert df[cols].sort_values("trial_id").reset_index(drop=True).equals(
        reference[cols].sort_values("trial_id").reset_index(drop=True))


def test_constraints_are_checked_before_training_and_the_search_goes_on(tmp_path, digits):
    settings = TrainSettings(epochs=2, device="cpu", threads=1, max_flops=1_000, cost_repeats=1)
    df = search(tmp_path, digits, settings=settings, budget=4)
    assert (df.state == "FAILED").all() and (df.failure == "INFEASIBLE").all()
    assert df.error.str.match(r"INFEASIBLE: flops \d+ > max_flops 1000$").all()
    assert all(m["flops"] > 1_000 and "latency_ms" in m for m in df.metrics)
    assert all(not h for h in df.history)  # nothing was trained


def test_objectives_apply_their_mode_once_and_a_missing_one_stops_the_search(tmp_path, digits):
    df = search(tmp_path, digits, objectives=["loss:min"], budget=3)
    assert (df.score == -1.0 / EPOCHS).all() and df.scores.map(len).eq(1).all()
    with pytest.raises(ValueError, match=r"^none of the first 5 trials reported the objective, so the search "
                                         r"stops: OBJECTIVE_MISSING: objective metric 'top1' missing from the "
                                         r"result; it reported: .*\bloss, params, .*val_acc$"):
        search(tmp_path / "b", digits, objectives=["top1"], budget=8)


def silent(ctx):
    pass


def raising(ctx):
    ctx.report(epoch=1, val_acc=0.5)
    raise RuntimeError("out of ideas")


def nan(ctx):
    ctx.report(epoch=1, val_acc=float("nan"))


def returns_a_number(ctx):
    return 0.93  # (as an Optuna objective does)


def a_generator(ctx):
    yield {"val_acc": 0.5}


def exiting(ctx):
    sys.exit(3)  # (in this process: it ended the whole search, exit code 3, no message)


def reporting_epoch(epoch):
    def fn(ctx):
        ctx.report(epoch=epoch, val_acc=0.5)

    return fn


def returning_epoch(epoch):
    def fn(ctx):
        return {"val_acc": 0.5, "epoch": epoch}

    return fn


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("cannot format me")


def unprintable(ctx):
    raise Unprintable()


def generator_exit(ctx):
    raise GeneratorExit  # (a BaseException, as some libraries' own aborts are: it ended the whole search)


def interrupting(ctx):
    raise KeyboardInterrupt("from the training")  # (on its own thread, no Ctrl-C: it ended the in-process search)


def nested_too_deep(ctx):
    deep: list = []
    for _ in range(300):
        deep = [deep]
    ctx.report(epoch=1, val_acc=0.5, deep=deep)


def named_by_a_tuple(ctx):
    return {"val_acc": 0.5, ("per", "class"): 0.1}


def saving(state):
    def fn(ctx):
        ctx.checkpoint.save(state)
        ctx.report(epoch=1, val_acc=0.5)
    return fn


@pytest.mark.parametrize(("fn", "kind", "error"), [
    (silent, "OBJECTIVE_MISSING", "OBJECTIVE_MISSING: the training function never called ctx.report(...)"),
    # a returned epoch as a reported one: 2**70 ended the search (journal), 2.5 was trained as 2, "x" int()'s words
    (returning_epoch(2**70), "ERROR", "ValueError: the returned metric epoch must be a whole number (an int below "
                                      "2**63), got 1180591620717411303424"),
    (returning_epoch(2.5), "ERROR", "ValueError: the returned metric epoch must be a whole number (an int below "
                                    "2**63), got 2.5"),
    (returning_epoch("x"), "ERROR", "ValueError: the returned metric epoch must be a whole number (an int below "
                                    "2**63), got 'x'"),
    (unprintable, "ERROR", "Unprintable (its message could not be made: RuntimeError)"),
    (generator_exit, "ERROR", "GeneratorExit"),
    (interrupting, "ERROR", "KeyboardInterrupt: from the training"),
    (nested_too_deep, "ERROR", "ValueError: metric 'deep' nests lists or mappings deeper than 32 levels"),
    (named_by_a_tuple, "ERROR", "ValueError: the training function returned a metric named ('per', 'class') "
                                "(tuple): metric names are strings"),
    # (int() took 1.5 and "2" as epochs 1 and 2; 10**30 ended the search: the journal's "exceeds 64-bit range")
    (reporting_epoch(1.5), "ERROR", "ValueError: report epoch must be a whole number (an int below 2**63), got 1.5"),
    (reporting_epoch("2"), "ERROR", "ValueError: report epoch must be a whole number (an int below 2**63), got '2'"),
    (reporting_epoch(10**30), "ERROR", "ValueError: report epoch must be a whole number (an int below 2**63), got "
                                       "1000000000000000000000000000000"),
    (returns_a_number, "OBJECTIVE_MISSING", "OBJECTIVE_MISSING: the training function never called ctx.report(...) "
     "(objective val_acc); nothing to score: it returned 0.93 (float); return a mapping of metrics such as "
     "{'val_acc': ...} or report them"),
    (a_generator, "OBJECTIVE_MISSING", "OBJECTIVE_MISSING: the training function never called ctx.report(...) "
     "(objective val_acc); nothing to score: it returned a generator (a function with yield), whose body never ran"),
    (reporting_epoch(0), "ERROR", "ValueError: report epochs count the epochs trained, from 1: got epoch 0"),
    # (saved, then the continuation that loaded it failed: torch's many lines, or "dictionary update sequence")
    (saving({"epoch": 1, "thing": range(3)}), "ERROR", "TypeError: ctx.checkpoint.save: state['thing'] is a range "
     "(range(0, 3)), which a checkpoint cannot hold (it is loaded back with torch.load(weights_only=True), which runs "
     "no code): keep tensors, numbers, strings, None, and lists and dicts of them"),
    (saving({"opt": {"lr": [np.float64(0.1)]}}), "ERROR", "TypeError: ctx.checkpoint.save: state['opt']['lr'][0] is "
     "a float64"),
    # (a weights-only load refuses a dict subclass or a namedtuple: they passed, and the continuation failed)
    (saving({"counts": collections.defaultdict(int)}), "ERROR", "TypeError: ctx.checkpoint.save: state['counts'] is "
     "a defaultdict"),
    (saving([1]), "ERROR", "TypeError: ctx.checkpoint.save takes a mapping of names to tensors, numbers, strings, "
     "lists and dicts; got list [1]"),
    (exiting, "ERROR", "SystemExit: 3"),
    (raising, "ERROR", "RuntimeError: out of ideas"),
    (nan, "NAN", "NAN: metric val_acc became nan in epoch 1"),
])
def test_training_functions_that_fail_are_failed_trials_and_the_search_goes_on(digits, fn, kind, error):
    ex = InProcessExecutor(ToySpace(), digits, TrainSettings(epochs=2, measure_costs=False),
                           train=fn)
    loop = SearchLoop(RandomSearch(ToySpace(), seed=0), ex, budget=3, broken_space_trials=None)
    results = loop.run()
    assert len(results) == 3 and all(r.failure == kind and r.error.startswith(error) for _, r in results)


def tensor_metrics(ctx):
    import torch

    ctx.report(epoch=1, val_acc=torch.tensor(0.5), correct=torch.tensor([12]), loss=np.float32(0.25))
    return {"val_acc": (torch.arange(4) < 3).float().mean(), "curve": np.arange(3)}


def test_one_number_in_a_tensor_or_array_is_a_number(tmp_path):
    """(an accuracy computed as (pred == y).float().mean() failed its trial: "must be a number, got tensor(0.5000)")"""
    df = nas.search(ToySpace(), "random", budget=2, executor="inprocess", data=None, train=tensor_metrics,
                    run_dir=tmp_path / "run")
    assert (df["state"] == "COMPLETE").all() and (df["score"] == 0.75).all()
    first = nas.load_results(tmp_path / "run")["history"].iloc[0][0]
    assert first == {"epoch": 1, "val_acc": 0.5, "correct": 12, "loss": 0.25}
    assert type(first["correct"]) is int and type(first["loss"]) is float


class Accuracy(float):
    """A float of the user's own (a metrics library's type)."""


class Level(enum.IntEnum):
    HIGH = 2


def subclassed_metrics(ctx):
    ctx.checkpoint.save({"seen": {1, 2}, "z": 1 + 2j})  # (a set and a complex a weights-only load takes)
    ctx.report(epoch=1, val_acc=Accuracy(0.25), level=Level.HIGH)


def test_numbers_of_a_subclass_are_numbers(tmp_path):
    """(d01a74d's exact-type rule made a float subclass text: every trial failed as OBJECTIVE_MISSING, "must be a
    number, got '0.25'", and an IntEnum was journaled as "2".)"""
    df = nas.search(ToySpace(), "random", budget=2, executor="inprocess", data=None, train=subclassed_metrics,
                    run_dir=tmp_path / "run", progress=False)
    assert (df.state == "COMPLETE").all() and (df.score == 0.25).all()
    assert nas.load_results(tmp_path / "run").history.iloc[0] == [{"epoch": 1, "val_acc": 0.25, "level": 2}]


def odd_metrics(ctx):
    ctx.report(epoch=1, val_acc=0.5, model=ctx.model, s={1, 2}, xs=[float("nan"), 1.0])


def test_metrics_the_journal_keeps_as_text_are_text_in_the_returned_results_too(tmp_path, caplog, digits):
    """(The frame nas.search returned held the live objects, a model per trial kept alive, and NaN where the run read
    back held null: the same run, two tables.)"""
    df = nas.search(ToySpace(), "random", budget=2, executor="inprocess", data=digits, train=odd_metrics,
                    run_dir=tmp_path / "run", progress=False, settings=TrainSettings(epochs=1, measure_costs=False))
    assert all(type(v) in (str, int, float, list, dict) for v in df.metrics.iloc[0].values())  # (no model kept alive)
    assert df.metrics.iloc[0]["model"].startswith("Sequential(")
    columns = ["trial_id", "score", "metrics", "history"]
    assert df[columns].equals(nas.load_results(tmp_path / "run")[columns])
    assert df.metrics.iloc[0]["s"] == "{1, 2}" and df.metrics.iloc[0]["xs"] == [None, 1.0]
    assert [m for m in (r.getMessage() for r in caplog.records) if "keeps as its text" in m] == [
        "metric 'model' is a Sequential, which the journal keeps as its text (str()); report numbers, strings, lists "
        "or mappings of them", "metric 's' is a set, which the journal keeps as its text (str()); report numbers, "
        "strings, lists or mappings of them"]


def huge(ctx):
    ctx.report(epoch=1, val_acc=10**40, steps=-(10**30))


def nested_huge(ctx):
    ctx.report(epoch=1, val_acc=0.5, counts=[2**64, {"n": -(2**70)}], by_class={0: 3, 1: (2**65,)})


def test_an_integer_beyond_64_bits_inside_a_metric_is_journaled_as_a_float(tmp_path):
    """(Only a metric's own integer was made a float: one inside a list or mapping ended the search.)"""
    nas.search(ToySpace(), "random", budget=2, executor="inprocess", data=None, train=nested_huge,
               run_dir=tmp_path / "run")
    history = nas.load_results(tmp_path / "run")["history"]
    assert history.map(lambda h: h[0]["counts"]).map(lambda c: c == [2.0**64, {"n": -(2.0**70)}]).all()
    assert history.map(lambda h: h[0]["by_class"]).map(lambda c: c == {"0": 3, "1": [2.0**65]}).all()


def test_an_integer_metric_beyond_64_bits_is_journaled_as_a_float(tmp_path):
    """The journal's integers are 64-bit: such a metric ended the search in a TypeError from the journal's writer
    (the run unreadable from that trial on). A JSON reader would make it a float; so does the trial."""
    df = nas.search(ToySpace(), "random", budget=2, executor="inprocess", data=None, train=huge,
                    run_dir=tmp_path / "run")
    assert (df["state"] == "COMPLETE").all() and (df["score"] == 1e40).all()
    assert nas.load_results(tmp_path / "run")["metrics"].map(lambda m: m["steps"]).eq(-1e30).all()


@pytest.mark.parametrize(("kw", "message"), [
    ({"scheduler": "ashaa"}, "unknown scheduler 'ashaa' (did you mean 'asha'?); known: asha, hyperband, median, none"),
    ({"scheduler": "asha", "options": {"eta": 1}}, "eta must be a finite number > 1, got 1"),
    ({"scheduler": "asha", "options": {"grace_period": 10}}, "grace_period must be <= max_epochs (9), got 10"),
    ({"scheduler": "asha", "options": {"etaa": 2}}, "unknown options ['etaa'] for scheduler 'asha'"),
    ({"scheduler": "asha", "strategy": "pbt"}, "scheduler 'asha' does not compose with strategy 'pbt'"),
])
def test_bad_scheduler_input_is_one_line(tmp_path, digits, kw, message):
    with pytest.raises(ValueError) as e:
        search(tmp_path, digits, budget=2, **kw)
    assert message in str(e.value) and "\n" not in str(e.value)


class DrawsItsWidth(ToySpace):
    """A space whose build draws from Python's random and numpy's global generator, as user code does."""

    def build(self, arch, task):
        import random

        import torch

        width = random.choice([4, 8, 32]) + int(np.random.randint(0, 3))
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(math.prod(task.input_shape), width),
                                   torch.nn.ReLU(), torch.nn.Linear(width, task.num_classes))


def test_a_build_that_draws_at_random_gives_the_same_model_for_the_same_seed(tmp_path, digits):
    """(Only torch was seeded: the same architecture and seed built a model of another width, with another score.)"""
    import random

    def run(name):
        random.seed(name)  # (whatever state the process is in)
        np.random.seed(len(name))
        df = nas.search(DrawsItsWidth(), "random", budget=4, executor="inprocess", data=digits, seed=0, epochs=1,
                        run_dir=tmp_path / name, progress=False)
        return [(m["params"], round(s, 6)) for m, s in zip(df.metrics, df.score, strict=True)]

    assert run("a") == run("bb")


def test_a_trial_without_data_loads_no_torch():
    """(A worker without data never loads torch, which costs each light actor seconds and 200 MB: seeding each
    trial imported it.)"""
    import subprocess

    code = ("import sys\nfrom nas.core.types import Trial\nfrom nas.train.runner import TrialRunner\n"
            "from nas.train.simple import noop\n"
            "result, _ = TrialRunner(None, None, train=noop).run(Trial(0, {'x': 1}), None, None)\n"
            "print(result.outcome.value, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["COMPLETE", "False"], out.stderr
