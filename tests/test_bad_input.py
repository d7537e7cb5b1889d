"""Bad input, each with a clear error: broken spaces, oversized models, misshapen data, malformed
configs, run directories that cannot be written or resumed. (Unknown names on the command line, a
malformed TOML file and a too-large model in the trainer are in test_cli.py and test_loop.py.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import nas
from nas.cli import your_code
from nas.core.spec import train_spec
from nas.core.types import check_seed
from nas.run.reader import read_journal
from nas.search_spaces.toy import ToySpace, toy_score
from nas.train.settings import TrainSettings
from nas.train.simple import scored
from tests.helpers import FAST

TOY = scored(toy_score)


def one_line_error(code, err, message):
    assert code == 2 and message in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


class NeverBuilds(nas.SearchSpace):
    def dims(self):
        return {"width": [1, 2, 3], "depth": [1, 2, 3]}

    def build(self, arch, task):
        raise RuntimeError("no such layer: Conv7d")


class NotAModule(NeverBuilds):
    def build(self, arch, task):
        return "a string"


class Outputs(NeverBuilds):
    """A model whose output is not one logit per class: ``classes`` outputs, or a tuple (logits and an aux head)."""

    def __init__(self, classes=None):
        self.classes = classes

    def build(self, arch, task):
        import torch

        head = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(self.classes or task.num_classes))
        return head if self.classes else Pair(head)


class Pair(__import__("torch").nn.Module):
    def __init__(self, head):
        super().__init__()
        self.head = head

    def forward(self, x):
        return self.head(x), self.head(x)


@pytest.mark.parametrize(("space", "message"), [
    (NeverBuilds(), "NeverBuilds.build failed for width=.*RuntimeError: no such layer: Conv7d"),
    (NotAModule(), "NotAModule.build must return a torch.nn.Module, got str"),
    # (a cross-entropy IndexError "Target 4 is out of bounds" for each trial; 12 outputs trained silently)
    (Outputs(3), r"the model of \{'width': \d, 'depth': \d\} outputs \(64, 3\) for a batch of 64; the built-in "
                 r"trainer needs \(64, 10\), one logit per class \(10 classes\): end build\(\)'s model in "
                 "task.num_classes outputs"),
    (Outputs(12), r"the model of .* outputs \(64, 12\) for a batch of 64; the built-in trainer needs \(64, 10\)"),
    (Outputs(), r"the model of .* outputs tuple for a batch of 64; the built-in trainer needs \(64, 10\)"),
])
def test_a_space_whose_build_always_fails_stops_the_search_early(tmp_path, space, message):
    """Five failed builds in a row and nothing else: the space is broken, not the candidates."""
    with pytest.raises(nas.InvalidSpace, match="the space's model could not be built or run for each of the first 5 "
                                               "trials, "
                       r"so the search stops \(fix the space, then resume\): " + message):
        nas.search(space, "random", budget=9, executor="inprocess", settings=TrainSettings(epochs=1),
                   run_dir=tmp_path / "run")
    errors = [r.error for _, r in read_journal(tmp_path / "run")]
    assert len(errors) == 5 and all(e.startswith("InvalidSpace") for e in errors)  # each one recorded


def test_a_broken_space_on_the_command_line(tmp_path, nas_cli, monkeypatch):
    (tmp_path / "brokenspace.py").write_text(
        "import nas\n\nclass Broken(nas.SearchSpace):\n"
        "    def dims(self):\n        return {'a': [1, 2, 3], 'b': [1, 2]}\n\n"
        "    def build(self, arch, task):\n        raise KeyError('missing block')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code, _, err = nas_cli("search", "--space", "brokenspace:Broken", "--executor", "inprocess", "--quiet",
                           "--epochs", "1", "--budget", "6", "--strategy", "random", "--run-dir", str(tmp_path / "r"))
    one_line_error(code, err, "Broken.build failed for a=")


USER_SPACES = {  # module name: (its text, what the one line says)
    "dims_raise": ("import nas\nclass S(nas.SearchSpace):\n    def dims(self):\n        raise RuntimeError('boom')\n",
                   r"RuntimeError in your code \(.*dims_raise.py:4, in dims\): boom"),
    "dims_list": ("import nas\nclass S(nas.SearchSpace):\n    def dims(self):\n        return [1, 2]\n",
                  r"S.dims\(\) must return a dict of decision names to lists of options, got \[1, 2\]"),
    "spec_raise": ("import nas\nclass S(nas.SearchSpace):\n    def dims(self):\n        return {'a': [1, 2]}\n"
                   "    def spec(self):\n        raise ValueError('no spec')\n",
                   r"ValueError in your code \(.*spec_raise.py:6, in spec\): no spec"),
    "import_raise": ("raise KeyError('not configured')\n",
                     r"KeyError in your code \(.*import_raise.py:1, in <module>\): 'not configured'"),
    "syntax_error": ("def f(:\n", r"cannot import module 'syntax_error' for space 'syntax_error:S': SyntaxError: "
                                    r"invalid syntax \(.*syntax_error.py, line 1\)"),
}


@pytest.mark.parametrize("module", USER_SPACES)
def test_an_error_in_the_users_own_space_is_one_line_naming_where(tmp_path, nas_cli, monkeypatch, module):
    """(dims raising, a space module that raises at import: a traceback, exit 1; dims returning a list of numbers:
    "cannot unpack non-iterable int object" from our code; a ValueError of the user's own was said as if ours.)"""
    text, message = USER_SPACES[module]
    (tmp_path / f"{module}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    code, _, err = nas_cli("search", "--space", f"{module}:S", "--executor", "inprocess", "--quiet", "--epochs", "1",
                           "--budget", "3", "--strategy", "random", "--run-dir", str(tmp_path / "r"))
    assert code == 2 and re.search("nas search: error: " + message, err), err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


TRAIN_FUNCTIONS = {  # each failed every trial of the budget (a TypeError, or "nothing to score: it returned a
    # coroutine"/"a generator")
    "def train(ctx, data):\n    pass\n": r"'bad_train_0:train' cannot be called as train\(ctx\): it takes "
                                         r"\(ctx, data\)",
    "def train():\n    pass\n": r"'bad_train_1:train' cannot be called as train\(ctx\): it takes \(\)",
    "async def train(ctx):\n    pass\n": r"'bad_train_2:train' is async \(async def\); it must be a plain def train",
    "def train(ctx):\n    yield 1\n": r"'bad_train_3:train' is a generator \(it yields\); it must report with ctx",
}


def test_a_training_function_that_cannot_be_called_as_train_ctx_is_refused_before_anything(tmp_path, nas_cli,
                                                                                           monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    for i, (text, message) in enumerate(TRAIN_FUNCTIONS.items()):
        (tmp_path / f"bad_train_{i}.py").write_text(text)
        code, _, err = nas_cli("search", "--space", "toy", "--executor", "inprocess", "--quiet", "--dataset", "none",
                               "--train-function", f"bad_train_{i}:train", "--run-dir", str(tmp_path / "r"))
        assert code == 2 and re.search("nas search: error: training function " + message, err), err
        assert not (tmp_path / "r").exists()
    with pytest.raises(ValueError, match=r"cannot be called as train\(ctx\): it takes \(\)$"):
        nas.search("toy", budget=2, executor="inprocess", data=None, train=lambda: None, run_dir=tmp_path / "api")
    assert not (tmp_path / "api").exists()


def test_an_error_of_ours_is_not_put_on_the_user():
    def users():
        check_seed(-1)  # (our code raises: the error is ours to word)

    with pytest.raises(ValueError) as ours:
        users()
    assert your_code(ours.value) is None
    with pytest.raises(RuntimeError) as theirs:
        raise RuntimeError("x")
    here = f"{Path(__file__).resolve()}:{theirs.tb.tb_lineno}"
    assert your_code(theirs.value) == f"{here}, in test_an_error_of_ours_is_not_put_on_the_user"


def test_too_large_models_fail_as_trials_and_the_search_finishes(tmp_path):
    df = nas.search(ToySpace(), "random", budget=3, executor="inprocess", run_dir=tmp_path / "run",
                    settings=TrainSettings(epochs=1, max_params=100))
    assert len(df) == 3 and (df.state == "FAILED").all()
    assert df.error.str.contains(r"INFEASIBLE: params [\d,]+ > max_params 100").all()


@pytest.mark.parametrize(("arrays", "message"), [
    ({"x": np.zeros(12), "y": np.zeros(12)}, "x has shape (12,); it must hold one row of inputs per example"),
    ({"x": np.zeros((12, 4)), "y": np.zeros((12, 2))}, "y must have shape (12,) to match x (12, 4), got (12, 2)"),
    ({"x": np.zeros((12, 4)), "y": np.zeros(12), "x_val": np.zeros((3, 5)), "y_val": np.zeros(3)},
     "train inputs (4,) and validation inputs (5,) differ"),
    ({"inputs": np.zeros((12, 4))}, "needs arrays 'x' and 'y', has ['inputs']"),
])
def test_datasets_with_the_wrong_shape(tmp_path, nas_cli, arrays, message):
    np.savez(tmp_path / "data.npz", **arrays)
    code, _, err = nas_cli("search", *FAST, "--dataset", str(tmp_path / "data.npz"),
                           "--run-dir", str(tmp_path / "r"))
    one_line_error(code, err, message)


def test_unknown_names_in_the_python_api_list_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match=r"unknown search space 'nb202' \(did you mean 'nb201'\?\); known: .*nb201"):
        nas.search("nb202", executor="inprocess", run_dir=tmp_path / "a")
    with pytest.raises(ValueError, match="unknown strategy 'annealing'; known: .*evolution.*random"):
        nas.search("toy", "annealing", executor="inprocess", run_dir=tmp_path / "b")


class NotSetUp(nas.Strategy):
    def __init__(self, space):  # (no super().__init__: an AttributeError on rng at the first ask)
        self.space = space

    def ask(self):
        return self.trial(self.space.sample(self.rng))

    def tell(self, trial, result):
        pass


class NoTell(nas.Strategy):  # (a bare NotImplementedError after the first trial)
    def ask(self):
        return self.trial(self.space.sample(self.rng))


@pytest.mark.parametrize(("given", "message"), [
    ({"space": 3}, "space must be a registered name, 'module:Class' or a nas.SearchSpace, got 3 (int)"),
    ({"strategy": NotSetUp(ToySpace())}, "strategy NotSetUp was not set up as a nas.Strategy: its __init__ must call "
                                         "super().__init__(space, seed=seed)"),
    ({"strategy": NoTell(ToySpace())}, "strategy NoTell does not implement tell: a strategy implements ask() -> "
                                       "Trial | None and tell(trial, result)"),
    ({"strategy": 3.5}, "strategy must be a registered name or a nas.Strategy, got 3.5 (float)"),
    ({"executor": object()}, "executor must be a registered name (inprocess, ray, simulated) or an Executor (with "
                             "checkpoints, slots, free_slots, submit, poll, stop, now, shutdown), got <object"),
    ({"callbacks": [print]}, "callbacks[0] must be a nas.Callback (with on_start, on_submit, on_event, on_result, "
                             "on_end), got <built-in function print>"),
    ({"settings": {"epochs": 2}}, "settings must be a nas TrainSettings (TrainSettings(epochs=..., lr=...)), got "
                                  "{'epochs': 2} (dict)"),  # (these three: AttributeErrors or TypeErrors from inside)
    ({"stop": 3}, "stop must be a nas StopSignal, got 3 (int)"),
    ({"warm_start": 3}, "warm_start must be a run directory or a list of them, got 3"),
    ({"run_options": [1]}, "run_options must be a mapping (snapshot_every=..., ...), got [1]"),
    ({"callbacks": 3}, "callbacks must be a nas.Callback or a list of them, got 3 (int)"),  # ("not iterable")
    ({"resume": "no"}, "resume must be True or False, got 'no' (str)"),  # (truthy: it resumed)
    ({"progress": "yes"}, "progress must be None or True or False, got 'yes' (str)"),
    ({"notify": 3}, "notify must be a function of one line of text, got 3 (int)"),  # (called only on Ray: ignored)
])
def test_objects_of_the_wrong_kind_are_refused_before_anything_is_made(tmp_path, given, message):
    """Handed to nas.search in place of a name or an object: a space of 3 used to be ignored (the default space
    searched), an executor or callback without the methods ended in an AttributeError after the run was made."""
    args = {"space": "toy", "strategy": "random", **given}
    with pytest.raises(TypeError) as info:
        nas.search(args.pop("space"), args.pop("strategy"), budget=2, executor=args.pop("executor", "inprocess"),
                   data=None, train=nas.train.simple.noop, run_dir=tmp_path / "run", **args)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("space", "kw", "message"), [
    # (train was never called; every trial of another space failed: "architecture keys do not match")
    ("nb201", {"train": nas.train.simple.noop}, "the simulated executor answers each trial from its table "
     "(nb201-cifar10) and runs no training function: leave train out, or run it on the inprocess or ray executor"),
    ("toy", {}, "the simulated executor's table nb201-cifar10 answers the space 'nb201', not 'toy': search 'nb201', "
                "or run this space on the inprocess or ray executor"),
])
def test_what_the_simulated_executor_cannot_answer_is_refused_before_anything(tmp_path, space, kw, message):
    with pytest.raises(ValueError) as info:
        nas.search(space, "random", budget=2, executor="simulated", data=None, run_dir=tmp_path / "run", **kw)
    assert str(info.value) == message
    assert not (tmp_path / "run").exists()


def test_an_executor_built_for_another_space_is_refused_before_anything(tmp_path):
    """(Every trial failed, as an ERROR: "architecture keys do not match the space".)"""
    from nas.engine.inprocess import InProcessExecutor
    from nas.search_spaces.nb201 import NB201Space

    with pytest.raises(ValueError) as info:
        nas.search("toy", "random", budget=2, executor=InProcessExecutor(NB201Space(), None), data=None,
                   run_dir=tmp_path / "run")
    assert str(info.value) == ("the executor you built runs the space 'nb201', not this search's 'toy': build it "
                               "with the search's space")
    assert not (tmp_path / "run").exists()


def test_a_strategy_object_serves_one_search(tmp_path):
    """(Handed to a second search it went on from its state: trial ids from 4, proposals other than its seed's,
    while run.json recorded the seed.)"""
    strategy = nas.make_strategy("random", ToySpace(), seed=0)
    nas.search("toy", strategy, budget=4, executor="inprocess", data=None, train=nas.train.simple.noop,
               run_dir=tmp_path / "a")
    with pytest.raises(ValueError) as info:
        nas.search("toy", strategy, budget=4, executor="inprocess", data=None, train=nas.train.simple.noop,
                   run_dir=tmp_path / "b")
    assert str(info.value) == ("strategy RandomSearch has proposed 4 trials already (in an earlier search): a search "
                               "starts from a strategy that has proposed none; make a new one")
    assert not (tmp_path / "b").exists()


def test_numpy_numbers_are_numbers_to_the_python_api(tmp_path):
    """(np.int64(3), as np.arange and arrays give them, was refused: "budget must be an integer, got np.int64(3)")"""
    df = nas.search("toy", "evolution", budget=np.int64(4), seed=np.int64(3), workers=np.int32(1), data=None,
                    time_budget=np.float32(60), strategy_options={"population": np.int64(2), "sample_size": np.int8(2)},
                    executor="inprocess", train=nas.train.simple.noop, run_dir=tmp_path / "run")
    assert len(df) == 4
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    search = run["search"]
    assert (search["budget"], search["seed"], search["strategy_options"]) == (4, 3, {"population": 2, "sample_size": 2})
    with pytest.raises(ValueError, match=r"config key 'budget' must be an integer, got 3.5 \(float\)"):
        nas.search("toy", budget=np.float64(3.5), executor="inprocess", run_dir=tmp_path / "other")


def test_one_warm_start_run_may_be_given_as_a_path(tmp_path):
    """(a string was taken as a list of one-letter run directories: "warm-start run '/'".)"""
    first = nas.search("toy", "random", budget=3, executor="inprocess", data=None, train=nas.train.simple.noop,
                       run_dir=tmp_path / "first")
    df = nas.search("toy", "random", budget=2, executor="inprocess", data=None, train=nas.train.simple.noop,
                    run_dir=tmp_path / "run", warm_start=tmp_path / "first")
    assert len(first) == 3 and (df.trial_id >= 0).sum() == 2 and (df.trial_id < 0).sum() == 3  # (learnt from)
    assert nas.load_run(tmp_path / "run")[0].search.warm_start == [str(tmp_path / "first")]


def test_one_callback_may_be_given_alone(tmp_path):
    class Count(nas.Callback):
        results = 0

        def on_result(self, status, trial, result):
            Count.results += 1

    nas.search("toy", "random", budget=2, executor="inprocess", data=None, train=nas.train.simple.noop,
               run_dir=tmp_path / "run", callbacks=Count())  # ("'Count' object is not iterable")
    assert Count.results == 2


def test_one_objective_may_be_given_as_a_string(tmp_path):
    df = nas.search("toy", "random", budget=2, executor="inprocess", data=None, train=nas.train.simple.noop,
                    run_dir=tmp_path / "run", objectives="val_acc:min")
    assert len(df) == 2 and nas.load_run(tmp_path / "run")[0].search.objectives == ["val_acc:min"]


def test_objectives_may_be_given_as_a_mapping_of_metric_to_mode(tmp_path):
    """(``{"loss": "min"}`` was read as ``["loss"]``: the search maximised loss, run.json said 'loss:max'.)"""
    df = nas.search("toy", "random", budget=2, executor="inprocess", data=None, train=nas.train.simple.noop,
                    run_dir=tmp_path / "run", objectives={"val_acc": "min"},
                    settings=nas.TrainSettings(objectives={"val_acc": "min"}))
    assert len(df) == 2 and nas.load_run(tmp_path / "run")[0].search.objectives == ["val_acc:min"]


@pytest.mark.parametrize(("name", "text", "message"), [
    ("bad.yaml", "space: [toy\n", "is malformed"),
    ("list.toml", "", "must hold a table of options"),
    ("list.yaml", "- toy\n", "must hold a table of options, got list"),
    ("run.json", "{}", "must end in .toml, .yaml or .yml"),
    ("latin1.toml", "", "config file '{d}/latin1.toml' is not UTF-8 text (byte 16)"),
    ("folder.toml", "", "config file '{d}/folder.toml' is a directory; name a .toml, .yaml or .yml file"),
    # (nine aliases of nine: 30 s and gigabytes before "population must be an integer", with a 2 GB error line)
    ("bomb.yaml", "strategy_options: {population: [&a [x, x], &b [*a, *a]]}\n",
     "config file '{d}/bomb.yaml' line 1: the alias *a is refused (an alias can expand a small file into gigabytes)"),
    ("twice.yaml", "budget: 1\nspace: toy\nbudget: 2\n", "config file '{d}/twice.yaml' line 3: key 'budget' is given "
                                                           "twice"),  # (the last one silently won)
    ("tag.yaml", "!!python/object/apply:os.system [touch {d}/ran]\n", "could not determine a constructor for the tag"),
    # (str.replace's AttributeError, a traceback; a recipe of a list "unhashable type")
    ("intkey.yaml", "1: 2\n", "config file '{d}/intkey.yaml': option names are strings, got 1"),
    ("nullkey.yaml", "null: 2\n", "config file '{d}/nullkey.yaml': option names are strings, got None"),
    ("recipe.toml", "recipe = [1, 2]\n", "unknown recipe [1, 2]; known: nb201, nb201-12"),
])
def test_malformed_config_files(tmp_path, nas_cli, name, text, message):
    (tmp_path / name).write_text(text)
    message = message.format(d=tmp_path)
    if name == "latin1.toml":
        (tmp_path / name).write_bytes("budget = 3 # café\n".encode("latin-1"))
    if name == "folder.toml":
        (tmp_path / name).unlink()
        (tmp_path / name).mkdir()
    if name == "list.toml":
        (tmp_path / name).write_text("[[runs]]\nspace = 'toy'\n")
        message = "unknown config keys ['runs']"
    if name == "tag.yaml":
        (tmp_path / name).write_text(text.format(d=tmp_path))
    code, _, err = nas_cli("search", "--config", str(tmp_path / name))
    one_line_error(code, err, message)
    assert not (tmp_path / "ran").exists()


def test_run_directories_that_cannot_be_written(tmp_path, nas_cli):
    (tmp_path / "file").write_text("not a directory")
    code, _, err = nas_cli("search", *FAST, "--run-dir", str(tmp_path / "file" / "run"))
    one_line_error(code, err, "cannot create run directory")
    if Path("/sys/fs").is_dir():  # read-only even for root, unlike a chmod-ed directory
        code, _, err = nas_cli("search", *FAST, "--run-dir", "/sys/fs")
        one_line_error(code, err, "run directory '/sys/fs' is not writable")


# -- resuming what cannot be resumed ---------------------------------------------------------------------
@pytest.fixture
def finished_run(tmp_path):
    nas.search(ToySpace(), "evolution", budget=4, executor="inprocess", data=None, train=TOY, run_dir=tmp_path / "run",
               strategy_options={"population": 2, "sample_size": 2})
    return tmp_path / "run"


def resume(run_dir, **kw):
    args = {"budget": 6, "executor": "inprocess", "data": None, "train": TOY,
            "strategy_options": {"population": 2, "sample_size": 2}}
    return nas.search(ToySpace(), kw.pop("strategy", "evolution"), run_dir=run_dir, resume=True, **{**args, **kw})


def test_resuming_a_different_search_names_the_differences(finished_run):
    with pytest.raises(ValueError, match=r"it is a different search \(strategy: run has 'evolution', this call "
                       r"'random'; strategy_options: .*seed: run has 0, this call 7"):
        resume(finished_run, strategy="random", strategy_options={}, seed=7)
    with pytest.raises(ValueError, match=r"epochs: run has 5, this call 2"):
        resume(finished_run, settings=TrainSettings(epochs=2))
    with pytest.raises(ValueError, match="budget may only be raised when resuming: .* has budget 4, got 3"):
        resume(finished_run, budget=3)
    assert len(resume(finished_run)) == 6  # and the right call goes on


def test_resuming_an_incompatible_run_directory(finished_run, tmp_path):
    cfg = json.loads((finished_run / "run.json").read_text())
    (finished_run / "run.json").write_text(json.dumps({**cfg, "format": 99}))
    with pytest.raises(ValueError, match=r"run.json: written by an incompatible version \(format 99; this version "
                       r"reads format 3 and converts format 2\)"):
        resume(finished_run)
    (finished_run / "run.json").write_text(json.dumps(cfg))

    journal = finished_run / "trials.jsonl"
    lines = journal.read_text().splitlines()
    rec = json.loads(lines[1])
    rec["trial"]["arch"] = {"conv": 3}
    journal.write_text("\n".join([lines[0], json.dumps(rec), *lines[2:]]) + "\n")
    with pytest.raises(ValueError, match=r"its journal holds trial \d+, which is not in space 'toy'"):
        resume(finished_run)
    journal.write_text("\n".join(lines) + "\n")

    state = finished_run / "snapshot.json"
    saved = state.read_bytes()
    state.write_bytes(b"\x80\x04 not a snapshot")
    with pytest.raises(ValueError, match="snapshot.json: is a pickle, not a JSON snapshot; refusing to load it"):
        resume(finished_run)
    state.write_bytes(json.dumps({"format": 0}).encode())
    with pytest.raises(ValueError, match="snapshot.json: is not a nas-snapshot file"):
        resume(finished_run)
    state.write_bytes(saved)

    with pytest.raises(ValueError, match="is not a run directory"):
        resume(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="resume=True needs the run_dir"):
        nas.search(ToySpace(), executor="inprocess", data=None, train=TOY, resume=True)


def test_cli_resume_takes_only_the_budget(finished_run, nas_cli, tmp_path):
    code, _, err = nas_cli("search", "--resume", str(finished_run), "--epochs", "3", "-o", "population=5")
    one_line_error(code, err, "only --budget and --time-budget (to raise them), --address and --trial-timeout may "
                              "be given, not --epochs -o")
    code, _, err = nas_cli("search", "--resume", str(finished_run), "--budget", "2")
    one_line_error(code, err, "budget may only be raised when resuming")  # (the budget is checked first)
    code, _, err = nas_cli("search", "--resume", str(finished_run), "--budget", "6")
    one_line_error(code, err, "it trains with a function that is custom, not importable (scored('toy_score'); code ")
    assert "); resume it from Python with the same one: nas.search(..., run_dir=" in err
    assert "resume=True, train=<that function>)" in err
    saved = json.loads((finished_run / "run.json").read_text())["train"]
    assert (saved["dataset"], saved["function"]) == (None, train_spec(TOY))
    assert saved["function"].startswith("custom, not importable (scored('toy_score'); code ")
    with pytest.raises(ValueError, match=r"it trains with a function that is custom, not importable"):
        resume(finished_run, train=None)  # the API without the function: the same refusal
    code, _, err = nas_cli("search", "--resume", str(tmp_path))
    one_line_error(code, err, "is not a run directory (no run.json)")


def test_a_run_given_a_dataset_object_resumes_only_where_it_is_handed_in_again(tmp_path, nas_cli):
    from nas.train.simple import noop

    digits = nas.load_dataset("digits")
    nas.search(ToySpace(), "random", budget=2, executor="inprocess", data=digits, train=noop, run_dir=tmp_path / "r")
    saved = json.loads((tmp_path / "r" / "run.json").read_text())["train"]
    assert (saved["dataset"], saved["data_object"], saved["function"]) == (None, "digits", "nas.train.simple:noop")
    code, _, err = nas_cli("search", "--resume", str(tmp_path / "r"), "--budget", "3")
    one_line_error(code, err, "it was given a Dataset object ('digits') in Python; resume it from Python")
    code, _, err = nas_cli("best", str(tmp_path / "r"), "--evaluate-test")
    one_line_error(code, err, "was given a Dataset object ('digits'), not a dataset spec")
    df = nas.search(ToySpace(), "random", budget=3, executor="inprocess", data=digits, train=noop,
                    run_dir=tmp_path / "r", resume=True)
    assert sorted(df.trial_id) == [0, 1, 2]


@pytest.mark.parametrize("space", ["macro", "toy"])
def test_a_space_that_takes_no_arguments_refuses_any(space):
    from nas.core.spec import space_from_spec

    with pytest.raises(ValueError, match=r"Space\(\) takes no arguments, got nonsense=1"):
        space_from_spec(space, {"nonsense": 1})


def test_connect_refuses_an_address_that_is_no_string_before_ray_starts():
    """(an AttributeError from deep in the address check: 'int' object has no attribute 'removeprefix'.)"""
    import ray

    before = ray.is_initialized()  # (False in the suite's order; True where a Ray test's shared cluster ran first)
    with pytest.raises(TypeError, match=r"^address must be a Ray cluster's address \(a string such as 'host:6379'\) "
                                        r"or None, got 6379 \(int\)$"):
        nas.connect(6379)
    assert ray.is_initialized() is before


@pytest.mark.parametrize(("name", "obj", "error", "message"), [
    # (register_space(3) was accepted, then every later search failed listing the names: "'<' not supported")
    (3, None, ValueError, "a search space is registered under a name, a non-empty string without ':' or spaces; "
                          "got 3"),
    ("", None, ValueError, "a search space is registered under a name, a non-empty string without ':' or spaces; "
                           "got ''"),
    ("my:space", None, ValueError, "a search space is registered under a name, a non-empty string without ':' or "
                                   "spaces; got 'my:space'"),
    ("mine", int, TypeError, "search space 'mine': <class 'int'> cannot be registered (it takes no attributes); "
                             "register a class of your own"),
])
def test_a_registration_that_cannot_work_is_refused_and_registers_nothing(name, obj, error, message):
    from nas.core.registry import register_space, spaces

    before = spaces.names()
    with pytest.raises(error) as info:
        register_space(name)(obj)
    assert str(info.value) == message and spaces.names() == before


@pytest.mark.parametrize(("kw", "message"), [
    # (threads=2**40 was kept, then torch's "Overflow when unpacking long" in the middle of the search)
    ({"threads": 2**40}, "threads must be None (the worker's CPU share) or an integer from 1 to 4096, got "
                         "1099511627776"),
    ({"threads": 0}, "threads must be None (the worker's CPU share) or an integer from 1 to 4096, got 0"),
    # (kept, then nas.search said "settings.seed 1 and seed 0 differ", blaming a conflict for a wrong type)
    ({"seed": "1"}, "seed must be an integer from 0 to 2**63 - 1, got '1'"),
    ({"seed": -1}, "seed must be an integer from 0 to 2**63 - 1, got -1"),
    ({"seed": True}, "seed must be an integer from 0 to 2**63 - 1, got True"),
])
def test_train_settings_refuse_what_cannot_train(kw, message):
    with pytest.raises(ValueError) as info:
        nas.TrainSettings(**kw)
    assert str(info.value) == message


def test_a_config_mapping_takes_numpy_numbers_and_names_what_is_wrong():
    """(``from_mapping({'epochs': np.int64(3)})`` was "must be an integer, got np.int64(3)" where nas.search took it;
    None an AttributeError on 'items'; a key of another type str.join's TypeError.)"""
    from nas.run.config import RunConfig

    assert RunConfig.from_mapping({"epochs": np.int64(3)}).train.settings.epochs == 3
    assert nas.TrainSettings(seed=np.int64(3), epochs=np.int32(2)).seed == 3
    with pytest.raises(TypeError, match=r"^a config is a mapping of option names to values, got None \(NoneType\)$"):
        RunConfig.from_mapping(None)
    with pytest.raises(ValueError, match=r"^unknown config keys \['1'\]; known: "):
        RunConfig.from_mapping({1: 2})


@pytest.mark.parametrize(("call", "error", "message"), [
    # (numpy's "expected non-negative integer" and "SeedSequence expects int"; True and 2**70 silently taken)
    (lambda: nas.make_strategy("random", ToySpace(), seed=-1), ValueError,
     "seed must be an integer from 0 to 2**63 - 1, got -1"),
    (lambda: nas.make_strategy("random", ToySpace(), seed=True), ValueError,
     "seed must be an integer from 0 to 2**63 - 1, got True"),
    (lambda: nas.load_dataset("digits", seed="1"), ValueError, "seed must be an integer from 0 to 2**63 - 1, got '1'"),
    # (an AttributeError on 'partition')
    (lambda: nas.load_dataset(3), TypeError, "a dataset is named by a string (digits, synthetic, a .npz path, "
                                             "cifar10:DIR, ...) or a path, got 3 (int)"),
])
def test_seeds_and_dataset_names_are_checked_where_they_are_taken(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert str(info.value) == message


def test_a_dataset_file_may_be_named_by_a_path(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=rng.normal(size=(40, 1, 4, 4)).astype(np.float32), y=np.arange(40) % 2)
    assert nas.load_dataset(tmp_path / "d.npz").task.num_classes == 2
    assert nas.make_strategy("random", ToySpace(), seed=np.int64(3)).seed == 3


@pytest.mark.parametrize(("options", "message"), [
    # (the first: int < str at the first result, the run half made; the second: RunStore's "unexpected keyword")
    ({"snapshot_every": "x"}, "run option snapshot_every must be an integer >= 1, got 'x'"),
    ({"nope": 1}, "unknown run options ['nope']; allowed: opener, snapshot_every, snapshot_seconds, snapshot_share, "
                  "status_interval, replay_seconds"),
    ({"snapshot_seconds": float("nan")}, "run option snapshot_seconds must be a number of seconds > 0, got nan"),
    ({"snapshot_share": 2}, "run option snapshot_share must be None or a number in (0, 1], got 2"),
])
def test_run_options_are_checked_before_anything_is_made(tmp_path, options, message):
    with pytest.raises(ValueError) as info:
        nas.search("toy", "random", budget=2, executor="inprocess", data=None, train=nas.train.simple.noop,
                   run_dir=tmp_path / "run", run_options=options)
    assert str(info.value) == message and not (tmp_path / "run").exists()


@pytest.fixture
def noop_run(tmp_path):
    """A finished run of the toy space with no data (its own training function, importable)."""
    nas.search("toy", "random", budget=2, executor="inprocess", data=None, train=nas.train.simple.noop,
               run_dir=tmp_path / "run")
    return tmp_path / "run"


@pytest.mark.parametrize(("call", "error", "message"), [
    (lambda run: nas.load_results(None), TypeError, "a run directory is a path, got None (NoneType)"),
    (lambda run: nas.retrain(3), TypeError, "a run directory is a path, got 3 (int)"),
    # (an AttributeError on 'spec')
    (lambda run: nas.retrain(run, space="toy"), TypeError,
     "space is the run's space as a nas.SearchSpace object (left out, it is rebuilt from the run's record), got 'toy' "
     "(str)"),
    # (search()'s "got multiple values for keyword argument 'seed'")
    (lambda run: nas.retrain(run, seed=5, budget=2), ValueError, "retrain sets budget, seed itself (the search's seed; "
     "a budget of the architectures chosen, top; its own strategy; out_dir): leave them out"),
    (lambda run: nas.connect(num_cpus="2"), ValueError, "num_cpus must be None (every CPU of this machine) or an "
                                                        "integer >= 1, got '2'"),  # (Ray's AssertionError)
])
def test_the_api_beside_search_names_a_bad_argument(noop_run, call, error, message):
    with pytest.raises(error) as info:
        call(noop_run)
    assert str(info.value) == message and not (noop_run / "retrain").exists()


def test_a_run_that_searched_no_data_is_retrained_with_none(noop_run):
    """(It was refused: "searched data given in Python (or none); pass data= to retrain", and data=None is the
    default, so only data='none' got through.)"""
    df = nas.retrain(noop_run, executor="inprocess")
    assert len(df) == 1 and (df["state"] == "COMPLETE").all()


def test_the_pareto_helpers_name_what_they_cannot_rank(noop_run):
    """(A metric no row has gave an empty front silently; a list an AttributeError on 'empty'; ragged points numpy's
    "inhomogeneous shape"; a results table to hypervolume pandas' KeyError, its metrics being in a column of
    mappings; arch_hash of a numpy number json's TypeError.)"""
    from nas.core.front import hypervolume, pareto_front
    from nas.core.types import arch_hash

    df = nas.load_results(noop_run)
    with pytest.raises(ValueError, match=r"^objective metric 'val_ac' is in no row of the results \(did you mean "
                                         r"'val_acc'\?\)$"):
        pareto_front(df, ["val_ac"])
    with pytest.raises(TypeError, match=r"^a results table is a pandas DataFrame \(nas.load_results\(RUN\)\), got "
                                        r"list$"):
        pareto_front([1, 2])
    with pytest.raises(ValueError, match=r"^points must be rows of 2 numbers, one per objective, got "
                                         r"\[\[1, 2\], \[1\]\]$"):
        hypervolume([[1, 2], [1]], [0, 0], ["a", "b"])
    assert hypervolume(df, [-1], ["val_acc"]) == 1.0  # (noop reports val_acc 0)
    assert arch_hash({"a": np.int64(1)}) == arch_hash({"a": 1})


class Stopped(BaseException):
    """Stands for the process dying mid-retraining: nothing in the platform catches it."""


def test_an_interrupted_retraining_is_continued_by_the_same_call(tmp_path, capsys):
    """A retraining killed (or stopped by a full disk) could be neither made again ("already holds a run") nor
    resumed (``nas search --resume OUT``: "unknown strategy 'FixedArchs'"), and its advice named that resume."""
    from nas.cli import main
    from nas.run.store import RunStore

    nas.search("toy", "random", budget=4, executor="inprocess", data=None, train=nas.train.simple.noop,
               run_dir=tmp_path / "run")

    class StopAtFirst(nas.Callback):
        def on_result(self, status, trial, result):
            raise Stopped

    with pytest.raises(Stopped):
        nas.retrain(tmp_path / "run", top=3, executor="inprocess", callbacks=[StopAtFirst()])
    out = tmp_path / "run" / "retrain"
    assert len(nas.load_results(out)) == 1
    assert main(["search", "--resume", str(out)]) == 2
    assert capsys.readouterr().err.strip().endswith(
        f"error: {str(out)!r} is a retraining (nas retrain): continue it with the nas retrain command that made it "
        "(the same run and --out)")
    df = nas.retrain(tmp_path / "run", top=3, executor="inprocess")
    assert sorted(df["trial_id"]) == [0, 1, 2] and (df["state"] == "COMPLETE").all()
    store = RunStore(out, None, strategy="FixedArchs")  # (no lock taken: only its words are read)
    assert store.continue_with == "run the same nas retrain command again"


def test_a_retraining_into_a_folder_another_holds_names_out(noop_run):
    """(It said "choose another --run-dir"; nas retrain's flag is --out.)"""
    from nas.run.lock import RunLock

    out = noop_run.parent / "out"
    out.mkdir()
    lock = RunLock(out).acquire()
    lock.write_holder()
    try:
        with pytest.raises(ValueError, match=r"is in use by another search \(pid .*; wait for it to end or choose "
                                             r"another --out$"):
            nas.retrain(noop_run, out_dir=out, executor="inprocess", out_flag="--out")
    finally:
        lock.release()


def test_the_cli_resume_of_a_run_given_a_dataset_object_says_to_resume_it_from_python(tmp_path, nas_cli):
    """(It said "the built-in trainer needs data: --dataset none is for a training function of your own", of a
    flag the user never typed.)"""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 8)).astype("float32")
    run = str(tmp_path / "run")
    nas.search("toy", "random", budget=2, epochs=1, executor="inprocess", progress=False, run_dir=run,
               data=nas.Dataset.from_arrays(x, (x[:, 0] > 0).astype("int64")))
    code, _, err = nas_cli("search", "--resume", run, "--budget", "3")
    one_line_error(code, err, f"cannot resume {run!r} here: it was given a Dataset object ('arrays') in Python; "
                              f"resume it from Python with the same one: nas.search(..., run_dir={run!r}, "
                              "resume=True, data=<that dataset>)")
