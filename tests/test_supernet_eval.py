"""Sub-network evaluation with a trained supernet's weights (nas.train.supernet_eval), a training function of the one
trial contract: batch-norm recalibration changes the statistics and is deterministic; the supernet is read once
per worker; a search over it with two objectives returns a Pareto front; the chosen architectures retrain
standalone; bad input is one line."""

from __future__ import annotations

import json
import os
import re
import shutil

import numpy as np
import pytest
import torch

import nas.api
from nas.core.types import FailureKind, Outcome, Trial
from nas.oneshot import retrain, train_supernet
from nas.run.reader import read_journal
from nas.search_spaces.macro import MacroSpace
from nas.search_spaces.nb201 import NB201Space
from nas.strategies.fixed import FixedArchs
from nas.train import supernet_eval
from nas.train.data import Dataset, load_dataset
from nas.train.device import DeviceSide
from nas.train.runner import TrialRunner
from nas.train.settings import TrainSettings
from nas.train.supernet_eval import SupernetEval, recalibrate_bn
from nas.train.supernet_io import WEIGHTS, read_info, weights_bytes

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/conftest.py)

SETTINGS = TrainSettings(device="cpu", threads=1, batch_size=128, lr=3e-3, measure_costs=False)
ARCH = {"depth": 2, "width_0": 32, "width_1": 64, "width_2": 16, "kernel_0": 3, "kernel_1": 5, "kernel_2": 3,
        "activation": "relu", "norm": "batch", "dropout": 0.1}


@pytest.fixture(scope="module")
def macro_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("supernets") / "macro"
    train_supernet("macro", "digits", d, epochs=2, settings=SETTINGS, seed=0, progress=False, executor="inprocess")
    return d


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


def test_bn_recalibration_changes_the_statistics_and_is_deterministic(macro_dir, digits):
    side = DeviceSide(digits, SETTINGS)
    ev = SupernetEval(macro_dir)
    supernet, _ = supernet_eval.cached_supernet(ev.info, ev.space, side.device)

    def recalibrated(seed: int) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        model = supernet.load_subnet(MacroSpace().build(ARCH, digits.task), ARCH)
        before = {k: v.clone() for k, v in model.state_dict().items() if "running" in k}
        rng = torch.get_rng_state()
        assert recalibrate_bn(model, side.feed, 4, 64, seed=seed) == 4
        assert torch.equal(torch.get_rng_state(), rng)  # the trial's own random numbers are left alone
        assert not model.training
        return before, {k: v for k, v in model.state_dict().items() if "running" in k}

    before, after = recalibrated(0)
    _, again = recalibrated(0)
    _, other = recalibrated(1)
    assert before.keys() == after.keys() and len(after) == 4  # two BN layers: mean and var each
    assert all(not torch.allclose(before[k], after[k]) for k in after)  # changed
    assert all(torch.equal(after[k], again[k]) for k in after)  # the same batches give the same statistics
    assert any(not torch.equal(after[k], other[k]) for k in after)  # (another seed, other batches)


def test_the_supernet_is_read_once_per_worker_and_a_trial_reports_its_accuracy(macro_dir, digits):
    supernet_eval._CACHE.clear()
    loads = supernet_eval.LOADS["count"]
    runner = TrialRunner(digits, SETTINGS, train=SupernetEval(macro_dir, bn_batches=2))
    results = [runner.run(Trial(i, {**ARCH, "width_0": w}), MacroSpace(), None)[0]
               for i, w in enumerate([16, 32, 64, 32])]
    assert all(r.ok for r in results), [r.error for r in results]
    assert [r.metrics["supernet_cached"] for r in results] == [False, True, True, True]
    assert supernet_eval.LOADS["count"] == loads + 1
    assert all(0.0 <= r.score <= 1.0 and r.metrics["supernet_epoch"] == 2 for r in results)
    assert results[1].score == results[3].score  # one architecture, evaluated twice: the same figures
    assert results[0].metrics["params"] < results[2].metrics["params"]  # the sub-network's own size is measured


def test_a_sub_network_scored_with_the_supernet_is_recorded_as_not_trained(macro_dir, digits):
    """Nothing is trained but the fine-tuning steps: 0 epochs, and the training seconds are those steps' (the runner
    recorded 1 epoch, and the evaluation's time as training time)."""
    plain, tuned = (TrialRunner(digits, SETTINGS, train=SupernetEval(macro_dir, bn_batches=2, finetune_steps=n))
                    .run(Trial(0, ARCH), MacroSpace(), None)[0].metrics for n in (0, 3))
    assert (plain["epochs_trained"], plain["train_seconds"], plain["samples_per_second"]) == (0, 0.0, 0.0)
    assert tuned["epochs_trained"] == 0 and 0 < tuned["train_seconds"] < tuned["eval_seconds"]
    assert tuned["samples_per_second"] > 0


def test_epochs_given_to_a_supernet_search_are_said_to_be_retrain_s(macro_dir, tmp_path, capsys):
    """--epochs trains nothing in a supernet search: a note says so and what it is kept for, nas retrain's default;
    without the flag, nothing is said."""
    from nas.cli import main

    common = ["--space", "macro", "--budget", "1", "--supernet", str(macro_dir), "--executor", "inprocess",
              "--quiet", "--device", "cpu", "--threads", "1", "--no-measure-costs"]
    assert main(["search", *common, "--run-dir", str(tmp_path / "a")]) == 0
    assert "note:" not in capsys.readouterr().err
    assert main(["search", *common, "--epochs", "2", "--run-dir", str(tmp_path / "b")]) == 0
    assert ("note: a supernet search trains nothing (each sub-network is scored with the supernet's weights); "
            "--epochs 2 is kept as the epochs nas retrain trains the chosen ones for") in capsys.readouterr().err
    out = retrain(tmp_path / "b", top=1, executor="inprocess")
    assert list(out["epochs"]) == [2] and out["metrics"].iloc[0]["epochs_trained"] == 2


def test_finetuning_before_evaluation_is_deterministic(macro_dir, digits):
    runner = TrialRunner(digits, SETTINGS, train=SupernetEval(macro_dir, bn_batches=2, finetune_steps=3))
    a, b = (runner.run(Trial(i, ARCH), MacroSpace(), None)[0] for i in (0, 1))
    assert a.ok and a.metrics["finetune_loss"] > 0
    assert (a.score, a.metrics["finetune_loss"]) == (b.score, b.metrics["finetune_loss"])


def test_a_search_over_the_supernet_with_two_objectives_returns_a_pareto_front(macro_dir, tmp_path):
    df = nas.api.search("macro", "evolution", budget=16, executor="inprocess", supernet=macro_dir, seed=0,
                        objectives=["val_acc", "params:min"], settings=SETTINGS, run_dir=tmp_path / "search",
                        strategy_options={"population": 6, "sample_size": 2})
    assert len(df) == 16 and (df["state"] == "COMPLETE").all()
    front = df.attrs["front"]
    assert len(front) >= 2
    points = [(r["val_acc"], -r["params"]) for _, r in front.iterrows()]
    assert not any(p != q and q[0] >= p[0] and q[1] >= p[1] for p in points for q in points)  # none dominated
    others = df[~df["trial_id"].isin(front["trial_id"])]
    for _, row in others.iterrows():  # every other trial is dominated by a member of the front
        acc, params = row["metrics"]["val_acc"], row["metrics"]["params"]
        assert any(a >= acc and -p >= -params for a, p in points)

    out = retrain(tmp_path / "search", top=2, epochs=1, executor="inprocess")
    assert len(out) == 2 and (out["state"] == "COMPLETE").all()
    assert "supernet_cached" not in out["metrics"].iloc[0]  # trained from scratch by the built-in function
    assert set(out["arch"]) == set(front.sort_values("val_acc", ascending=False)["arch"][:2])


def test_weights_changed_during_a_search_fail_the_trial_in_one_line(macro_dir, digits, tmp_path):
    d = tmp_path / "copy"
    shutil.copytree(macro_dir, d)
    ev = SupernetEval(d)
    train_supernet("macro", "digits", d, epochs=3, settings=SETTINGS, seed=0, progress=False, resume=True,
                   executor="inprocess")
    supernet_eval._CACHE.clear()
    result, _ = TrialRunner(digits, SETTINGS, train=ev).run(Trial(0, ARCH), MacroSpace(), None)
    assert result.failure is FailureKind.SUPERNET_CHANGED  # (not CHECKPOINT_MISSING, a lost checkpoint: no stop)
    assert "changed since this search read it" in result.error and "\n" not in result.error


def test_a_supernet_retrained_under_a_search_stops_it_at_the_next_trial(macro_dir, digits, tmp_path):
    """The weights file is replaced (as a resumed training writes it) after the first result. Each trial checks
    the file, so the next one fails as SUPERNET_CHANGED and the search stops there in one line, its finished
    trials kept. Before, the worker's cached copy hid the change until a worker restarted, and from then on every
    trial failed (328 of 400 on Ray) while the search went on to its budget and ended as finished."""
    d = tmp_path / "supernet"
    shutil.copytree(macro_dir, d)

    class Retrain(nas.Callback):
        def on_result(self, status, trial, result):
            if trial.trial_id == 0:
                torch.manual_seed(1)
                (d / "new").write_bytes(weights_bytes(MacroSpace().supernet(digits.task),
                                                      space_spec=MacroSpace().spec(), epoch=3))
                os.replace(d / "new", d / WEIGHTS)

    supernet_eval._CACHE.clear()
    run = tmp_path / "run"
    args, options = ("macro", "random"), dict(budget=6, executor="inprocess", supernet=d, seed=0, settings=SETTINGS,
                                              run_dir=run)
    with pytest.raises(nas.SupernetChanged, match=re.escape(
            "the supernet changed under this search, so it stops after 2 finished trials (kept): "
            f"{d / WEIGHTS} changed since this search read it (sha256 ")) as e:
        nas.api.search(*args, callbacks=[Retrain()], **options)
    assert str(e.value).endswith("; search the supernet as it is now into a new --run-dir (a resume of this run is "
                                 "refused while the weights are not those it searched)") and "\n" not in str(e.value)
    ends = [(r.outcome, r.failure) for _, r in read_journal(run)]
    assert ends == [(Outcome.COMPLETE, None), (Outcome.FAILED, FailureKind.SUPERNET_CHANGED)]
    assert json.loads((run / "status.json").read_text())["state"] == "failed"
    with pytest.raises(ValueError, match="cannot resume .*: the supernet .* was trained on or replaced"):
        nas.api.search(*args, resume=True, **options)


@pytest.mark.parametrize(("space", "supernet", "data", "message"), [
    ("toy", "macro", "digits", "space 'toy' (ToySpace) has no supernet; spaces with one: macro, nb201"),
    ("macro", "missing", "digits", "supernet directory '{d}/missing' does not exist"),
    ("macro", "empty", "digits", "'{d}/empty' holds no trained supernet (no supernet.safetensors; train one with "
                                 "`nas supernet train --run-dir {d}/empty`)"),
    # (a run killed before its first epoch: the command it named was refused, "already holds a run; pass --resume")
    ("macro", "unfinished", "digits", "'{d}/unfinished' holds no trained supernet (no supernet.safetensors; train one "
                                      "with `nas supernet train --resume --run-dir {d}/unfinished`)"),
    # (a search run: the command it named was refused, "is a search run, not a supernet run directory")
    ("macro", "search", "digits", "'{d}/search' is a search run, not a supernet run directory: pass the run "
                                  "directory of a trained supernet (`nas supernet train --run-dir DIR`)"),
    ("macro", "nb201", "digits", "supernet '{d}/nb201' is of space 'nb201', not 'macro'"),
    (NB201Space(channels=8), "nb201", "digits", "supernet '{d}/nb201' was trained for space {{'class': 'nb201', "
     "'args': {{'channels': 4}}}}, not {{'class': 'nb201', 'args': {{'channels': 8}}}} (tensor"),
    ("macro", "macro", "tabular", "supernet '{d}/macro' was trained for Task(input_shape=(1, 8, 8), num_classes=10), "
     "this data is Task(input_shape=(5,), num_classes=2)"),
    ("macro", "macro", None, "searching supernet '{d}/macro' needs data"),
])
def test_bad_input_is_one_line_and_starts_nothing(macro_dir, tmp_path, space, supernet, data, message):
    d = macro_dir.parent
    if supernet == "nb201" and not (d / "nb201").exists():
        train_supernet(NB201Space(channels=4), "digits", d / "nb201", epochs=1, settings=SETTINGS, progress=False,
                       executor="inprocess")
    (d / "empty").mkdir(exist_ok=True)
    (d / "unfinished").mkdir(exist_ok=True)
    (d / "unfinished" / "run.json").write_text("{}")
    (d / "search").mkdir(exist_ok=True)
    (d / "search" / "run.json").write_text('{"format": 1, "search": {"space": "macro"}, "train": {}}')
    if data == "tabular":
        rng = np.random.default_rng(0)
        data = Dataset.from_arrays(rng.normal(size=(40, 5)).astype(np.float32), np.arange(40) % 2)
    with pytest.raises(ValueError, match="^" + re.escape(message.format(d=d))) as e:
        nas.api.search(space, "random", budget=2, executor="inprocess", supernet=d / supernet, data=data,
                       settings=SETTINGS, run_dir=tmp_path / "run")
    assert "\n" not in str(e.value) and not (tmp_path / "run").exists()


def test_supernet_and_train_are_one_or_the_other(macro_dir, tmp_path):
    with pytest.raises(ValueError, match="pass either supernet= .* or train=, not both"):
        nas.api.search("macro", "random", budget=1, executor="inprocess", supernet=macro_dir, train=print,
                       settings=SETTINGS, run_dir=tmp_path / "run")


def test_options_are_checked_and_the_space_comes_from_the_weights(macro_dir):
    assert SupernetEval(macro_dir).space.spec() == {"class": "macro", "args": {}}
    assert read_info(macro_dir).epoch == 2
    with pytest.raises(ValueError, match="bn_batches must be an integer >= 0, got -1"):
        SupernetEval(macro_dir, bn_batches=-1)
    assert FixedArchs(MacroSpace(), [ARCH]).ask().arch == ARCH


def test_a_misspelt_supernet_option_names_the_nearest(macro_dir, tmp_path, capsys):
    from nas.cli import main

    code = main(["search", "--space", "macro", "--supernet", str(macro_dir), "--executor", "inprocess",
                 "--supernet-option", "bn_batchs=2", "--run-dir", str(tmp_path / "run")])
    assert code == 2 and capsys.readouterr().err.strip().endswith(
        "unknown supernet options ['bn_batchs'] (did you mean 'bn_batches'?); allowed: bn_batches, bn_batch_size, "
        "finetune_steps")


@pytest.mark.ray
def test_on_ray_each_worker_reads_the_supernet_once(ray_local, macro_dir, tmp_path):
    df = nas.api.search("macro", "random", budget=8, workers=2, supernet=macro_dir, seed=0, settings=SETTINGS,
                        cpus_per_trial=1.0, run_dir=tmp_path / "run")
    assert len(df) == 8 and (df["state"] == "COMPLETE").all()
    cached = df["metrics"].map(lambda m: m["supernet_cached"])
    assert df["worker"].nunique() == 2
    assert (~cached).sum() == 2 and df[~cached]["worker"].nunique() == 2  # one read per worker, not per trial


def test_nas_search_supernet_records_it_and_resumes_from_the_command_line(macro_dir, tmp_path, capsys):
    from nas.cli import main

    run = tmp_path / "run"
    common = ["--executor", "inprocess", "--quiet", "--device", "cpu", "--threads", "1", "--no-measure-costs"]
    code = main(["search", "--space", "macro", "--strategy", "random", "--budget", "2", "--supernet", str(macro_dir),
                 "--supernet-option", "bn_batches=2", "--run-dir", str(run), *common])
    assert code == 0, capsys.readouterr().err
    saved = json.loads((run / "run.json").read_text())["train"]
    assert (saved["supernet"], saved["supernet_options"]) == (str(macro_dir), {"bn_batches": 2})
    assert saved["supernet_sha256"] == read_info(macro_dir).sha256
    assert main(["search", "--resume", str(run), "--budget", "3", "--quiet"]) == 0, capsys.readouterr().err
    df = nas.api.load_results(run)
    assert len(df) == 3 and (df.state == "COMPLETE").all()

    other = tmp_path / "other"  # the same directory holding another supernet: the resume is refused, naming it
    shutil.copytree(macro_dir, other)
    train_supernet("macro", "digits", other, epochs=3, settings=SETTINGS, seed=0, progress=False, resume=True,
                   executor="inprocess")
    cfg = json.loads((run / "run.json").read_text())
    cfg["train"]["supernet"] = str(other)
    (run / "run.json").write_text(json.dumps(cfg))
    assert main(["search", "--resume", str(run), "--budget", "4", "--quiet"]) == 2
    err = capsys.readouterr().err  # (it said "it is a different search (supernet_sha256: ...)")
    assert f"the supernet {str(other)!r} was trained on or replaced since this search began" in err
    assert "supernet_sha256" in err and "search the supernet as it is now into a new --run-dir" in err
    assert main(["search", "--space", "macro", "--supernet", str(tmp_path / "run"), "--run-dir", str(tmp_path / "x"),
                 *common]) == 2
    assert f"{str(tmp_path / 'run')!r} is a search run, not a supernet run directory" in capsys.readouterr().err


def test_a_search_on_other_data_than_the_supernet_saw_is_warned(macro_dir, tmp_path, caplog):
    """Another dataset of the same shape, or the supernet's dataset split by another seed (whose validation
    examples then include ones the supernet trained on), scores sub-networks on the wrong examples: said once at
    the start. The supernet's own data and seed: nothing said."""
    said = []
    for i, (data, seed) in enumerate([("digits", 0), ("synthetic", 0), ("digits", 1)]):
        caplog.clear()
        nas.api.search("macro", "random", budget=1, executor="inprocess", supernet=macro_dir, seed=seed, data=data,
                       settings=SETTINGS, run_dir=tmp_path / str(i), progress=False)
        said.append([r.getMessage() for r in caplog.records if "was trained on dataset" in r.getMessage()])
    assert said[0] == []
    assert said[1] == [f"the supernet {macro_dir} was trained on dataset 'digits' split with seed 0, other examples "
                       "than this search's (dataset 'synthetic', seed 0): sub-networks are scored on data the supernet "
                       "saw in training or never saw; search with the supernet's dataset and seed"]
    assert len(said[2]) == 1 and "(dataset 'digits', seed 1)" in said[2][0]


def test_a_search_on_an_unfinished_supernet_is_warned(tmp_path, caplog):
    """A supernet stopped after 1 of its 3 epochs (as Ctrl-C leaves it), and one still training: each search of it
    says so at its start, with the epochs trained of those planned, as other data is said; once finished, nothing.
    Before, nothing was said, and sub-networks were silently scored with part-trained weights."""
    d, said = tmp_path / "supernet", []

    def search(i: int) -> None:
        caplog.clear()
        nas.api.search("macro", "random", budget=1, executor="inprocess", supernet=d, seed=0, settings=SETTINGS,
                       run_dir=tmp_path / str(i), progress=False)
        said.append([r.getMessage() for r in caplog.records if r.getMessage().startswith(f"the supernet {d} ")])

    def stop(record):
        search(0)  # (the training holds its run: still training)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_supernet("macro", "digits", d, epochs=3, settings=SETTINGS, seed=0, progress=False,
                       executor="inprocess", on_epoch=stop)
    search(1)
    assert said[0] == [f"the supernet {d} is still training (epoch 1 of 3): sub-networks are scored with the weights "
                       "of epoch 1, and this search stops when the next epoch's are written; search it once it is "
                       "finished"]
    assert said[1] == [f"the supernet {d} has trained 1 of its 3 epochs (state stopped): sub-networks are scored with "
                       "those weights; to score them with the finished supernet, continue it first with "
                       f"`nas supernet train --resume --run-dir {d}`"]
    train_supernet("macro", "digits", d, epochs=3, settings=SETTINGS, seed=0, progress=False, executor="inprocess",
                   resume=True)
    search(2)
    assert said[2] == []  # (finished: nothing to say)
