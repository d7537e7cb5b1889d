"""Supernet training on a real local Ray cluster (nas.engine.supernet_actor): one actor trains what the driver
would, a gang of two ranks trains data-parallel (DDP) as one process at twice the batch, a rank killed mid-training
fails it with a typed one-line error and a resume continues from the last epoch's checkpoint."""

from __future__ import annotations

import sys

import pytest
import ray.cloudpickle
import torch
from safetensors.torch import load, load_file

from nas.engine.supernet_actor import SupernetFailed, SupernetGang, SupernetJob, weights_digest
from nas.oneshot import train_supernet
from nas.run.supernet_store import EPOCHS, read_epochs, supernet_status
from nas.search_spaces.macro import MacroSpace
from nas.train.data import load_dataset
from nas.train.settings import TrainSettings
from nas.train.supernet_io import WEIGHTS

pytestmark = pytest.mark.ray

SETTINGS = TrainSettings(device="cpu", threads=1, batch_size=128, lr=3e-3, schedule="cosine")


class PlainMacro(MacroSpace):
    """The macro space without batch norm and dropout: a step's gradient is a plain mean over its batch's rows, so
    two ranks at batch b/2 (their gradients averaged) take the step one process takes at batch b."""

    def dims(self) -> list[tuple[str, tuple]]:
        return [(name, ("none",) if name == "norm" else (0.0,) if name == "dropout" else options)
                for name, options in super().dims()]


ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # (the workers cannot import a test module)


def weights(run_dir) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / WEIGHTS))


def largest_gap(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


def test_one_actor_trains_the_supernet_the_driver_would(ray_local, tmp_path):
    run = {"epochs": 1, "seed": 3, "settings": SETTINGS, "progress": False}
    here = train_supernet("macro", "digits", tmp_path / "here", executor="inprocess", **run)
    actor = train_supernet("macro", "digits", tmp_path / "actor", executor="ray", **run)
    same = ["epoch", "steps", "paths", "samples", "ranks", "lr"]
    assert actor[same].to_dict("records") == here[same].to_dict("records")
    assert actor["train_loss"].tolist() == pytest.approx(here["train_loss"].tolist(), rel=1e-5)
    # The same paths on the same batches from the same initial weights; the CPU kernels of a Ray worker process round
    # differently from the driver's (the actor's own code run in the driver matches the driver bit for bit), and
    # Adam's normalised steps carry that rounding into the weights a little.
    assert largest_gap(weights(tmp_path / "here"), weights(tmp_path / "actor")) < 1e-3
    st = supernet_status(tmp_path / "actor")
    assert st is not None and (st["state"], st["epochs_done"], st["epochs"]) == ("finished", 1, 1)


def test_two_ranks_train_as_one_process_at_twice_the_batch(ray_local, tmp_path):
    sgd = TrainSettings(device="cpu", threads=1, optimizer="sgd", lr=0.05, schedule="constant", seed=0)
    data, job = load_dataset("digits", seed=0), SupernetJob(epochs=2, sampling="uniform", seed=0)
    gang = SupernetGang(PlainMacro(), data, TrainSettings(**{**sgd.__dict__, "batch_size": 32}), job, ranks=2)
    try:
        done = list(gang.train())
    finally:
        gang.shutdown()
    (rank1,) = gang.followed
    n = len(data.x_train)
    assert [d.record["samples"] for d in done] == [n - n % 2] * 2  # the shards of each epoch cover it once
    assert [r["epoch"] for r in rank1["records"]] == [1, 2] and [d.record["ranks"] for d in done] == [2, 2]
    assert rank1["digest"] == weights_digest(load(done[-1].weights))  # both ranks end with the same weights

    one = train_supernet(PlainMacro(), data, tmp_path / "one", epochs=2, sampling="uniform", seed=0,
                         settings=TrainSettings(**{**sgd.__dict__, "batch_size": 64}), progress=False,
                         executor="inprocess")
    assert one["steps"].tolist() == [d.record["steps"] for d in done]
    assert [d.record["train_loss"] for d in done] == pytest.approx(one["train_loss"].tolist(), rel=1e-4)
    # (were the ranks' shards not distinct halves of each epoch, the averaged steps would differ from one process's)
    assert largest_gap(load(done[-1].weights), weights(tmp_path / "one")) < 1e-4


def test_a_rank_killed_mid_training_fails_it_in_one_line_and_a_resume_continues(ray_local, tmp_path):
    run_dir = tmp_path / "sn"
    run = {"epochs": 3, "seed": 1, "settings": SETTINGS, "progress": False, "trial_workers": 2}
    killed = []

    def kill_rank_1(record):  # epoch 1 is on disk while both ranks train epoch 2
        if record["epoch"] == 1:
            victim = ray.get_actor("nas-supernet-0-rank-1")
            ray.kill(victim, no_restart=True)
            killed.append(record["epoch"])

    with pytest.raises(SupernetFailed) as failed:
        train_supernet("macro", "digits", run_dir, on_epoch=kill_rank_1, **run)
    assert killed == [1]
    assert failed.value.kind.value == "COLLECTIVE" and "\n" not in str(failed.value)
    assert "supernet training failed" in str(failed.value) and "rank" in str(failed.value)
    trained = [r["epoch"] for r in read_epochs(run_dir / EPOCHS)]
    assert trained and trained[0] == 1 and len(trained) < 3
    st = supernet_status(run_dir)
    assert st is not None and st["state"] == "failed"

    resumed = train_supernet("macro", "digits", run_dir, resume=True, **run)
    assert resumed["epoch"].tolist() == [1, 2, 3]
    assert [r["epoch"] for r in read_epochs(run_dir / EPOCHS)] == [1, 2, 3]
    assert supernet_status(run_dir)["state"] == "finished"


def test_bad_worker_options_are_one_line(tmp_path):
    with pytest.raises(ValueError, match="trial_workers=2 .* needs executor 'ray'"):
        train_supernet("macro", "digits", tmp_path / "a", epochs=1, settings=SETTINGS, executor="inprocess",
                       trial_workers=2)
    with pytest.raises(ValueError, match="executor 'simulated' cannot train a supernet"):
        train_supernet("macro", "digits", tmp_path / "b", epochs=1, settings=SETTINGS, executor="simulated")
    with pytest.raises(ValueError, match="trial_workers must be an integer >= 1, got 0"):
        train_supernet("macro", "digits", tmp_path / "c", epochs=1, settings=SETTINGS, trial_workers=0)
    for cpus in (0, -1.0, float("inf"), True):  # (0 reached Ray's placement group: its own message, a run made)
        with pytest.raises(ValueError, match=f"cpus_per_worker must be a finite number > 0, got {cpus!r}"):
            train_supernet("macro", "digits", tmp_path / "d", epochs=1, settings=SETTINGS, cpus_per_worker=cpus)
    assert list(tmp_path.iterdir()) == []  # nothing made


def test_a_supernet_run_that_cannot_start_is_taken_back(ray_local, tmp_path):
    """More ranks than the cluster has CPUs: refused once Ray is up, after the run directory was made; it is taken
    back (it stayed, 'created', and the same --run-dir then needed --resume)."""
    with pytest.raises(ValueError, match="3 ranks of 1 CPUs need 3 CPUs; the Ray cluster has 2"):
        train_supernet("macro", "digits", tmp_path / "sn", epochs=1, settings=SETTINGS, trial_workers=3)
    assert list(tmp_path.iterdir()) == []
