"""Resources per trial on CPU: torch threads equal each worker's CPU share, ``--gpus-per-trial`` falls back
to CPUs (and says so) on a cluster without GPUs, bad values fail in one line, and ``nas bench train`` runs."""

from __future__ import annotations

import json

import pytest
import ray
import torch

import nas
from nas.cli import main
from nas.core.types import Trial
from nas.engine.inprocess import InProcessExecutor
from nas.engine.protocol import KeepRule, finished
from nas.engine.ray_pool import RayExecutor
from nas.run.reader import read_journal
from nas.search_spaces.macro import MacroSpace
from nas.train.runner import TrialRunner
from nas.train.settings import TrainSettings
from nas_benchmarks.trainer_speed import bench_dataset

ARCH = {"depth": 1, "width_0": 16, "width_1": 16, "width_2": 16, "kernel_0": 3, "kernel_1": 3, "kernel_2": 3,
        "activation": "relu", "norm": "none", "dropout": 0.0}


@pytest.fixture(scope="module")
def digits():
    return nas.load_dataset("digits")


def run_one(ex, trial_id: int = 0):
    ex.submit(Trial(trial_id, ARCH), keep=KeepRule())
    results = []
    while not results:
        results = finished(ex.poll(timeout=60))
    return results[0][1]


@pytest.mark.ray
@pytest.mark.parametrize(("workers", "cpus", "gpus", "threads", "expected"), [
    (1, 2.0, 0.0, None, 2),  # torch threads = the actor's CPU share
    (2, 0.5, 0.25, None, 1),  # a fractional share gets one thread; no GPU in the cluster: CPUs, flagged
    (1, 2.0, 0.0, 1, 1),  # TrainSettings(threads=...) wins over the share
])
def test_actor_threads_device_and_gpu_fallback(ray_local, digits, workers, cpus, gpus, threads, expected):
    ex = RayExecutor(MacroSpace(), digits, TrainSettings(epochs=1, threads=threads), workers=workers,
                     cpus_per_trial=cpus, gpus_per_trial=gpus, namespace=f"nas-test-res-{workers}-{cpus}-{threads}")
    try:
        assert ex.fallback_to_cpu == (gpus > 0) and ex.gpus_per_trial == 0
        assert ex.settings.device == "cpu"  # an actor that holds no GPU never wanders onto a visible one
        infos = ray.get([ex.actor(i).info.remote() for i in range(workers)])
        assert [i["threads"] for i in infos] == [expected] * workers
        result = run_one(ex)
        assert result.ok and result.metrics["threads"] == expected and result.metrics["device"] == "cpu"
    finally:
        ex.shutdown()


@pytest.mark.ray
def test_search_cli_prints_the_fallback_line(ray_local, tmp_path, capsys, caplog):
    code = main(["search", "--space", "macro", "--strategy", "random", "--budget", "1", "--workers", "1",
                 "--epochs", "1", "--gpus-per-trial", "0.25", "--run-dir", str(tmp_path / "run"), "--quiet"])
    said = capsys.readouterr()
    assert code == 0
    lines = [line for line in [*(said.out + said.err).splitlines(), *(r.getMessage() for r in caplog.records)]
             if "no GPU in the Ray cluster" in line]
    assert lines == ["no GPU in the Ray cluster: gpus_per_trial=0.25 ignored, training on CPUs"]  # (once: it was twice)
    ((_, result),) = read_journal(tmp_path / "run")
    assert result.ok and result.metrics["device"] == "cpu"


@pytest.mark.parametrize("flag,value", [("--gpus-per-trial", "-1"), ("--gpus-per-trial", "1.5"),
                                        ("--cpus-per-trial", "0"), ("--cpus-per-trial", "-2")])
def test_bad_resource_values_are_one_line_errors(flag, value, tmp_path, capsys):
    code = main(["search", flag, value, "--budget", "1", "--run-dir", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert f"{flag} must be" in err and value in err  # (the flag as typed)


def test_whole_gpus_per_trial_are_allowed():
    assert nas.api.SearchConfig.from_mapping({"gpus_per_trial": 2}).execution.gpus_per_trial == 2
    assert nas.api.SearchConfig.from_mapping({"gpus_per_trial": 0.25}).execution.gpus_per_trial == 0.25


@pytest.mark.parametrize("threads", [0, -1, 1.5, True])
def test_bad_thread_counts(threads):
    with pytest.raises(ValueError, match="threads"):
        TrainSettings(threads=threads)


def test_in_process_trials_use_their_threads_and_restore_the_process_count(digits, keep_threads):
    torch.set_num_threads(2)
    ex = InProcessExecutor(MacroSpace(), digits, TrainSettings(epochs=1, threads=1))
    result = run_one(ex)
    assert result.ok and result.metrics["threads"] == 1
    assert torch.get_num_threads() == 2


def test_trainer_on_cpu_keeps_the_data_on_the_device_it_trains_on(digits):
    trainer = TrialRunner(digits, TrainSettings(epochs=1, device="cpu"))
    side = trainer.side
    assert side.device.type == "cpu" and side.feed.x_train.device.type == "cpu"
    assert not side.autocast_on and side.memory_format == torch.contiguous_format


def test_bench_train_prints_both_columns(tmp_path, capsys, keep_threads):
    out_json = tmp_path / "train.json"
    code = main(["bench", "train", "--space", "macro", "--dataset", "synthetic", "--epochs", "1", "--repeats", "1",
                 "--threads", "1", "--device", "cpu", "--json", str(out_json)])
    out = capsys.readouterr().out
    assert code == 0
    assert "bare loop samples/s" in out and "nas trainer samples/s" in out and "ours/bare" in out
    assert "packing trials on one GPU needs a GPU: skipped" in out
    figures = json.loads(out_json.read_text())
    (row,) = figures["compare"]
    assert row["device"] == "cpu" and row["bare"] > 0 and row["ours"] > 0 and figures["packing"] == []


def test_bench_synthetic_32_dataset():
    ds = bench_dataset("synthetic-32", samples=100)
    assert ds.task.input_shape == (3, 32, 32) and len(ds.x_train) + len(ds.x_val) == 100


@pytest.mark.parametrize("argv,match", [
    (["--pack", "0"], "--pack"),
    (["--pack", "1,two"], "--pack"),
    (["--space", "nb201", "--space", "macro", "--arch", "x"], "--arch needs exactly one --space"),
    (["--epochs", "0"], "--epochs"),
    (["--space", "toy"], "no default architecture"),
])
def test_bench_train_bad_values(argv, match, capsys):
    assert main(["bench", "train", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only machine's answer")
def test_bench_train_cuda_without_a_gpu(capsys):
    assert main(["bench", "train", "--device", "cuda"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_a_last_batch_of_one_sample_is_dropped_so_batchnorm_trains():
    import numpy as np

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(65, 1, 8, 8)).astype(np.float32), rng.integers(10, size=65)
    data = nas.Dataset.from_arrays(x, y, x_val=x[:10], y_val=y[:10])
    result, _ = TrialRunner(data, TrainSettings(epochs=1, batch_size=64)).run(
        Trial(0, {**ARCH, "norm": "batch"}), MacroSpace(), None)
    assert result.ok, result.error


@pytest.mark.ray
def test_a_gpu_metric_objective_on_a_ray_cluster_without_gpus_is_refused(ray_local, tmp_path, capsys):
    """(--gpus-per-trial 1 passed the input check, the cluster had no GPU, and every trial failed OBJECTIVE_MISSING.)"""
    code = main(["search", "--space", "toy", "--strategy", "random", "--budget", "2", "--workers", "1", "--epochs",
                 "1", "--gpus-per-trial", "1", "--objective", "val_acc", "--objective", "peak_memory_mb:min",
                 "--run-dir", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].endswith("objective 'peak_memory_mb' is measured on a GPU only, and this Ray "
                                          "cluster has none, so every trial would train on a CPU: leave it out, or "
                                          "run the trials on GPUs")
    assert not (tmp_path / "run").exists()
