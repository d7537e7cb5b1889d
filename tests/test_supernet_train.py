"""Single-path one-shot supernet training (nas.train.supernet_spos) in its own run directory
(nas.run.supernet_store): killed by SIGKILL after an epoch's checkpoint, a resumed run reaches the weights of a run
that never stopped; the lock, the journal of epochs, safe loading and bad input as a search's."""

from __future__ import annotations

import json
import pickle
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from nas.core.space import Task
from nas.oneshot import train_supernet
from nas.run.store import RunStore
from nas.run.supernet_store import EPOCHS, SupernetStore, read_epochs
from nas.search_spaces.macro import MacroSpace
from nas.search_spaces.nb201 import NB201Space
from nas.train.settings import TrainSettings
from nas.train.supernet_io import WEIGHTS, load_weights, read_info, weights_bytes
from nas.train.supernet_spos import PathSampler

SETTINGS = TrainSettings(device="cpu", threads=1, batch_size=128, lr=3e-3, schedule="cosine")
RUN = {"epochs": 4, "sampling": "uniform", "seed": 3, "settings": SETTINGS, "progress": False, "executor": "inprocess"}

CHILD = """
import sys
from nas.oneshot import train_supernet
from nas.train.settings import TrainSettings

fifo, run_dir, kill_after = sys.argv[1], sys.argv[2], int(sys.argv[3])

def on_epoch(record):
    if record["epoch"] == kill_after:  # epoch k is on disk: say so, then wait to be killed
        with open(fifo, "w") as f:
            f.write(f"epoch {record['epoch']} saved\\n")
        sys.stdin.read()

train_supernet("macro", "digits", run_dir, epochs=4, sampling="uniform", seed=3, progress=False, on_epoch=on_epoch,
               executor="inprocess",
               settings=TrainSettings(device="cpu", threads=1, batch_size=128, lr=3e-3, schedule="cosine"))
"""


def weights(run_dir) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / WEIGHTS))


def test_a_run_killed_after_an_epoch_resumes_to_the_weights_of_a_run_that_never_stopped(tmp_path, signals):
    whole = train_supernet("macro", "digits", tmp_path / "whole", **RUN)
    assert list(whole["epoch"]) == [1, 2, 3, 4]

    killed = tmp_path / "killed"
    saved = signals("saved")
    child = subprocess.Popen([sys.executable, "-c", CHILD, saved.path, str(killed), "2"], stdin=subprocess.PIPE)
    try:
        assert saved.wait(timeout=120) == "epoch 2 saved"
        with pytest.raises(ValueError, match=r"is in use by another search \(pid \d+"):  # the child holds the lock
            train_supernet("macro", "digits", killed, resume=True, **RUN)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -9
    assert [r["epoch"] for r in read_epochs(killed / EPOCHS)] == [1, 2]

    resumed = train_supernet("macro", "digits", killed, resume=True, **RUN)
    assert list(resumed["epoch"]) == [1, 2, 3, 4]
    a, b = weights(tmp_path / "whole"), weights(killed)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (tmp_path / "whole" / WEIGHTS).read_bytes() == (killed / WEIGHTS).read_bytes()  # the same sha256
    cols = ["epoch", "train_loss", "train_acc", "lr", "steps"]
    assert whole[cols].to_dict("records") == resumed[cols].to_dict("records")
    run = json.loads((killed / "run.json").read_text())
    assert run["kind"] == "supernet" and len(run["resumed"]) == 1


def test_equal_weights_are_written_as_equal_bytes(tmp_path):
    # safetensors writes its header's metadata in a hash map's order, another one each call: a search records the
    # file's sha256 and would refuse a supernet rewritten with the very same tensors
    space = MacroSpace()
    net = space.supernet(Task((4,), 2))
    files = {weights_bytes(net, space_spec=space.spec(), epoch=3) for _ in range(8)}
    assert len(files) == 1
    (tmp_path / WEIGHTS).write_bytes(files.pop())
    info = read_info(tmp_path)
    assert (info.epoch, info.task, info.space_spec) == (3, Task((4,), 2), space.spec())
    loaded = load_weights(info)
    assert all(torch.equal(loaded[k], v) for k, v in net.state_dict().items())


def test_numpy_numbers_are_numbers_to_train_supernet(tmp_path):
    """(np.int64(1) epochs was refused: "epochs must be an integer >= 1, got np.int64(1)")"""
    df = train_supernet("macro", "digits", tmp_path / "run", **{**RUN, "epochs": np.int64(1), "seed": np.int64(3)})
    assert list(df["epoch"]) == [1]
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert (run["epochs"], run["seed"]) == (1, 3)


def test_a_crash_between_checkpoint_and_journal_is_repaired_on_resume(tmp_path):
    d = tmp_path / "run"
    train_supernet("macro", "digits", d, **{**RUN, "epochs": 2})
    lines = (d / EPOCHS).read_bytes().splitlines(keepends=True)
    (d / EPOCHS).write_bytes(lines[0] + lines[1][:10])  # epoch 2 checkpointed, its record torn mid-write
    df = train_supernet("macro", "digits", d, resume=True, **{**RUN, "epochs": 3})
    assert list(df["epoch"]) == [1, 2, 3]
    assert [r["epoch"] for r in read_epochs(d / EPOCHS)] == [1, 2, 3]


def test_a_resume_must_be_the_same_run_and_reads_no_pickle(tmp_path):
    d = tmp_path / "run"
    train_supernet("macro", "digits", d, **{**RUN, "epochs": 1})
    with pytest.raises(ValueError, match=r"different supernet run \(sampling: 'uniform' there, 'fair' here\)"):
        train_supernet("macro", "digits", d, resume=True, **{**RUN, "sampling": "fair"})
    with pytest.raises(ValueError, match="already holds a run"):
        train_supernet("macro", "digits", d, **RUN)
    search = RunStore.create(tmp_path / "search", {"space": "macro"})
    search.close()
    with pytest.raises(ValueError, match="is a search run, not a supernet run directory"):
        train_supernet("macro", "digits", tmp_path / "search", resume=True, **RUN)
    (d / "checkpoint.json").write_bytes(pickle.dumps({"state": "anything"}))
    with pytest.raises(ValueError, match="is a pickle, not a JSON snapshot; refusing to load it"):
        train_supernet("macro", "digits", d, resume=True, **RUN)


def test_bad_input_is_one_line_and_writes_nothing(tmp_path):
    for kwargs, message in [({"space": "toy"}, "space 'toy' (ToySpace) has no supernet"),
                            ({"sampling": "greedy"}, "unknown sampling 'greedy'; known: uniform, fair, sandwich"),
                            ({"space": "nb201", "sampling": "sandwich"}, "sampling 'sandwich' needs a supernet whose"),
                            ({"seed": -1}, "seed must be an integer from 0 to 2**63 - 1, got -1"),  # (numpy's
                            ({"seed": 2**64}, "seed must be an integer from 0 to 2**63 - 1, got 1844"),  # words)
                            ({"seed": "1"}, "seed must be an integer from 0 to 2**63 - 1, got '1'")]:
        with pytest.raises(ValueError, match=re.escape(message)) as e:
            train_supernet(kwargs.pop("space", "macro"), "digits", tmp_path / "x", **{**RUN, **kwargs})
        assert "\n" not in str(e.value)
    assert not (tmp_path / "x" / "run.json").exists()
    for data, kwargs, message in [  # (AttributeErrors from inside; on_epoch's TypeError after the first epoch)
            (3, {}, "data must be a dataset's name (such as 'digits') or a nas Dataset, got 3 (int)"),
            ("digits", {"settings": {"lr": 0.1}}, "settings must be a nas TrainSettings, got {'lr': 0.1} (dict)"),
            ("digits", {"on_epoch": 3}, "on_epoch must be a function of each epoch's record, got 3 (int)"),
            ("digits", {"address": 6379}, "address must be a Ray cluster's address or None, got 6379 (int)")]:
        with pytest.raises(TypeError) as info:
            train_supernet("macro", data, tmp_path / "x", **{**RUN, **kwargs})
        assert str(info.value) == message
    with pytest.raises(TypeError, match=r"^run_dir must be a path or None, got 3 \(int\)$"):
        train_supernet("macro", "digits", 3, **RUN)
    assert not (tmp_path / "x").exists()


def test_fair_sampling_gives_every_option_of_every_decision_a_turn_each_step():
    space = MacroSpace()
    sampler = PathSampler(space.supernet(Task((6,), 2)), "fair", seed=0)
    for _ in range(5):
        paths = sampler.paths()
        assert len(paths) == 3  # the most options a decision has
        for name, options in space.decisions.items():
            assert {p[name] for p in paths} == set(options)


def test_the_sandwich_rule_trains_the_largest_and_the_smallest_path_each_step():
    space = MacroSpace()
    sampler = PathSampler(space.supernet(Task((6,), 2)), "sandwich", seed=0)
    largest, smallest, *rest = sampler.paths()
    assert (largest["depth"], largest["width_0"], smallest["depth"], smallest["width_0"]) == (3, 64, 1, 16)
    assert len(rest) == 2
    with pytest.raises(ValueError, match="use uniform or fair"):
        PathSampler(NB201Space().supernet(Task((3, 8, 8), 10)), "sandwich")


def test_the_sampler_and_its_state_give_the_same_paths_again():
    space = MacroSpace()
    a = PathSampler(space.supernet(Task((6,), 2)), "uniform", seed=4)
    a.paths()
    b = PathSampler(space.supernet(Task((6,), 2)), "uniform", seed=99)
    b.load_state_dict(a.state_dict())
    assert [a.paths() for _ in range(3)] == [b.paths() for _ in range(3)]


def test_the_store_keeps_the_journal_and_the_checkpoint_in_step(tmp_path):
    store = SupernetStore.create(tmp_path / "s", {"space": "macro", "epochs": 2})
    store.on_epoch({"epoch": 1, "train_loss": 1.5}, {"epoch": 1, "w": np.arange(3)}, b"w")
    store.close()
    store = SupernetStore.resume(tmp_path / "s", {"space": "macro", "epochs": 2})
    try:
        assert store.checkpoint()["w"].tolist() == [0, 1, 2] and store.records[0]["train_loss"] == 1.5
        status = json.loads((tmp_path / "s" / "status.json").read_text())
        assert status["epoch"] == 1 and status["state"] == "running"
    finally:
        store.close()


def test_the_command_line_trains_and_resumes_with_no_flag_repeated(tmp_path, capsys):
    """`--resume` continues with what the run was trained with (its space, data, sampling, seed, hyperparameters):
    only what changes is given (here the epochs). A flag given that differs from the run is refused, naming it."""
    from nas.cli import main

    where = ["--run-dir", str(tmp_path / "sn"), "--device", "cpu", "--threads", "1", "--quiet", "--executor",
             "inprocess"]
    assert main(["supernet", "train", "--space", "macro", "--sampling", "fair", "--seed", "1", "--optimizer", "sgd",
                 "--lr", "0.02", "--epochs", "1", *where]) == 0  # (SGD: paths not yet trained have no momentum)
    assert main(["supernet", "train", "--resume", "--epochs", "2", *where]) == 0
    out = capsys.readouterr().out
    assert "supernet trained 1 epochs in" in out and "supernet trained 2 epochs in" in out
    assert f"nas search --space macro --dataset digits --supernet {tmp_path / 'sn'}" in out
    assert [r["epoch"] for r in read_epochs(tmp_path / "sn" / EPOCHS)] == [1, 2]
    cfg = json.loads((tmp_path / "sn" / "run.json").read_text())
    assert (cfg["sampling"], cfg["seed"], cfg["hparams"]["optimizer"], cfg["hparams"]["lr"]) == ("fair", 1, "sgd", 0.02)
    assert main(["supernet", "train", "--resume", "--epochs", "3", "--lr", "0.5", "--sampling", "uniform",
                 *where]) == 2
    assert capsys.readouterr().err.strip().endswith("it is a different supernet run (hparams.lr: 0.02 there, 0.5 "
                                                    "here; sampling: 'fair' there, 'uniform' here)")
    assert main(["supernet", "train", "--resume"]) == 2
    assert capsys.readouterr().err.strip() == ("nas supernet: error: --resume needs --run-dir, the supernet run to "
                                               "continue")


def test_nas_status_says_what_a_supernet_run_is(tmp_path, capsys):
    from nas.cli import main

    d = tmp_path / "sn"
    train_supernet("macro", "digits", d, **{**RUN, "epochs": 1})
    assert main(["status", str(d)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"supernet  {d}  (macro on digits, uniform sampling, 1 rank)")
    assert out[1:3] == ["state     finished", out[2]] and out[2].startswith("epochs    1/1, last epoch: train loss ")
    (d / "status.json").unlink()  # (as a stop between the first epoch's journal line and its status.json leaves it)
    assert main(["status", str(d)]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "state     stopped"  # (it said "created")
    assert main(["supernet", "train", "--executor", "inprocess", "--trial-workers", "2", "--run-dir",
                 str(tmp_path / "x")]) == 2
    assert "trial_workers=2 (data-parallel training) needs executor 'ray'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # (argparse's own exit for a flag's bad value)
        main(["supernet", "train", "--executor", "inprocess", "--seed", "-1", "--run-dir", str(tmp_path / "y")])
    assert e.value.code == 2 and not (tmp_path / "y").exists()
    assert "argument --seed: the seed must be an integer from 0 to 2**63 - 1, got -1" in capsys.readouterr().err


# -- a damaged supernet run directory: one line, nothing written ----------------------------------------------------
@pytest.fixture(scope="module")
def one_epoch(tmp_path_factory):
    run = tmp_path_factory.mktemp("sn") / "sn"
    train_supernet("macro", "synthetic", run, epochs=1, settings=TrainSettings(device="cpu", threads=1),
                   executor="inprocess", progress=False)
    return run


@pytest.fixture
def sn_copy(one_epoch, tmp_path):
    import shutil

    shutil.copytree(one_epoch, tmp_path / "sn")
    return tmp_path / "sn"


def files_of(run):
    return {p.name: p.read_bytes() for p in sorted(run.iterdir()) if p.is_file()}


def refused_in_one_line(capsys, argv, *fragments):
    from nas.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and all(f in err[0] for f in fragments), err


def with_metadata(path, **changes):
    """The weights file with ``changes`` in its header's metadata (the tensors as they were)."""
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    header["__metadata__"].update(changes)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data[8 + n:])


@pytest.mark.parametrize("changes", [{"space_spec": "[" * 100_000 + "]" * 100_000},  # (RecursionError)
                                     {"task": '{"input_shape": [1e400], "num_classes": 10}'},  # (OverflowError)
                                     {"task": '{"input_shape": [-5, 8, 8], "num_classes": -3}'}])  # (torch's error)
def test_a_weights_header_that_lies_is_one_line(sn_copy, tmp_path, capsys, changes):
    with_metadata(sn_copy / WEIGHTS, **changes)
    refused_in_one_line(capsys, ["search", "--supernet", str(sn_copy), "--executor", "inprocess", "--budget", "2",
                                 "--dataset", "synthetic", "--run-dir", str(tmp_path / "s")],
                        f"{WEIGHTS} is not a supernet weights file of this version")
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("value", ["null", '"x"', "[1]"])
def test_an_epoch_record_of_the_wrong_type_is_one_line_naming_its_line(sn_copy, capsys, value):
    journal = sn_copy / EPOCHS
    record = json.loads(journal.read_text().splitlines()[0])
    journal.write_text(json.dumps({**record, "train_loss": "@@"}).replace('"@@"', value) + "\n")
    refused_in_one_line(capsys, ["status", str(sn_copy)], f"{EPOCHS} line 1 is an epoch record of the wrong shape "
                                                          "(train_loss: expected a number")


@pytest.mark.parametrize("damage", ["fifo journal", "folder journal", "folder weights", "checkpoint state"])
def test_a_damaged_supernet_resume_is_refused_before_anything_is_written(sn_copy, capsys, damage):
    """A FIFO journal hung the resume; a folder in the journal's or the weights' place was found only once it wrote
    (after an epoch's training, for the weights), a checkpoint state of {} was a KeyError traceback: each after
    run.json and .lock.json had been rewritten."""
    import os

    if damage.endswith("journal"):
        (sn_copy / EPOCHS).unlink()
        os.mkfifo(sn_copy / EPOCHS) if damage.startswith("fifo") else (sn_copy / EPOCHS).mkdir()
    elif damage == "folder weights":
        (sn_copy / WEIGHTS).unlink()
        (sn_copy / WEIGHTS).mkdir()
    else:
        checkpoint = json.loads((sn_copy / "checkpoint.json").read_text())
        checkpoint["payload"]["state"] = {}
        (sn_copy / "checkpoint.json").write_text(json.dumps(checkpoint))
    before = files_of(sn_copy)
    said = "is not a supernet checkpoint" if damage == "checkpoint state" else "not a regular file"
    refused_in_one_line(capsys, ["supernet", "train", "--resume", "--run-dir", str(sn_copy), "--executor", "inprocess",
                                 "--epochs", "2", "--quiet"], said)
    assert files_of(sn_copy) == before


def test_an_interrupt_while_the_first_epoch_is_journaled_keeps_the_run(tmp_path, monkeypatch):
    """SIGTERM (as Ctrl-C) landing after the first epoch's journal line was written, before the store had noted the
    record, made the store take the whole new run back: its run.json, checkpoint and journaled epoch deleted (CI saw
    it once in test_sigterm). The epoch's checkpoint on disk now keeps the run."""
    from nas.run.supernet_store import EpochJournal

    store = SupernetStore.create(tmp_path / "s", {"space": "macro", "epochs": 2})

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(EpochJournal, "sync", interrupted)  # (the line is written; its fsync is interrupted)
    with pytest.raises(KeyboardInterrupt):
        store.on_epoch({"epoch": 1, "train_loss": 1.5, "train_acc": 0.5}, {"epoch": 1, "w": np.arange(3)}, b"w")
    store.discard()
    assert [r["epoch"] for r in read_epochs(tmp_path / "s" / EPOCHS)] == [1]
    assert (tmp_path / "s" / "run.json").is_file() and (tmp_path / "s" / "checkpoint.json").is_file()
