"""Data-parallel trials on a real local Ray cluster (2 CPUs: one gang of 2 ranks, 1 torch thread each): DDP over
gloo trains as one process would at the gangs' total batch, a scheduler's stop lands on every rank at the same
epoch, and a rank that dies, fails alone or stops answering never hangs the search."""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import ray
import torch

import nas
from nas.cli import main
from nas.core.space import SearchSpace, Task
from nas.core.types import Trial
from nas.engine.gang_executor import GangExecutor
from nas.engine.protocol import EventKind, KeepRule, finished
from nas.monitor.status import format_status, run_status
from nas.run.reader import read_journal
from nas.search_spaces.toy import ToySpace, toy_score
from nas.train.data import Dataset
from nas.train.fit import fit
from nas.train.hparams import make_optimizer
from nas.train.settings import TrainSettings
from nas.train.shard import batch_spans, shard_order

pytestmark = pytest.mark.ray

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this module


class MLP(SearchSpace):
    """A two-layer perceptron without batch norm; width 0 cannot be built."""

    def dims(self):
        return {"width": [16, 64, 0]}

    def build(self, arch, task):
        if not arch["width"]:
            raise ValueError("no width")
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(task.input_shape[0], arch["width"]),
                                   torch.nn.ReLU(), torch.nn.Linear(arch["width"], task.num_classes))


def indexed_data(n=96, n_val=30):
    """Float rows whose first feature is the row's index / n (so a rank's batches say which rows it saw)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n + n_val, 8)).astype(np.float32)
    y = (x[:, 1] + x[:, 2] > 0).astype(np.int64) + (x[:, 3] > 1)
    x[:n, 0] = np.arange(n) / n
    return Dataset("indexed", x[:n], y[:n], x[n:], y[n:])


class SpyFeed:
    """A rank's ``ctx.data``, recording the rows of each batch it hands out."""

    def __init__(self, feed, n):
        self.feed, self.n, self.epochs = feed, n, []

    def __getattr__(self, name):
        return getattr(self.feed, name)

    def train_batches(self, batch_size, augment=None):
        batches = []
        self.epochs.append(batches)
        for x, y in self.feed.train_batches(batch_size, augment):
            batches.append(torch.round(x[:, 0] * self.n).long().tolist())
            yield x, y


class RecordedFit:
    """The built-in fit, unchanged, with each rank's rows written to ``<directory>/rows-<trial>-<rank>.json``."""

    def __init__(self, directory, n):
        self.directory, self.n = directory, n

    def __call__(self, ctx):
        ctx.data = spy = SpyFeed(ctx.data, self.n)
        try:
            fit(ctx)
        finally:
            path = Path(self.directory) / f"rows-{ctx.trial.trial_id}-{ctx.rank}.json"
            path.write_text(json.dumps({"rank": ctx.rank, "world": ctx.world_size, "epochs": spy.epochs}))


def run_trials(ex, trials):
    results = {}
    for trial in trials:
        ex.submit(trial, keep=KeepRule(save=True))
        while trial.trial_id not in results:
            results.update({t.trial_id: r for t, r in finished(ex.poll(timeout=60))})
        while not ex.free_slots():  # (its other ranks' ends)
            ex.poll(timeout=60)
    return results


def test_two_ranks_at_half_the_batch_train_as_one_process_at_the_whole_batch(ray_local, tmp_path):
    data, epochs, b, seed = indexed_data(), 3, 8, 5
    settings = TrainSettings(epochs=epochs, batch_size=b, optimizer="sgd", lr=0.1, momentum=0.9, device="cpu",
                             seed=seed, max_flops=1000)  # width 16: 352 FLOPs; width 64: 1408
    ex = GangExecutor(MLP(), data, settings, trial_workers=2, train=RecordedFit(str(tmp_path), len(data.x_train)))
    try:
        results = run_trials(ex, [Trial(0, {"width": 16}), Trial(1, {"width": 64}), Trial(2, {"width": 0})])
    finally:
        ex.shutdown()
    result = results[0]
    assert result.outcome.value == "COMPLETE" and result.epoch == epochs and result.metrics["ranks"] == 2
    assert result.metrics["flops"] == 352 and len(result.metrics["nodes"]) == 2  # measured once, on rank 0
    # the agreement before training: a constraint that only rank 0 measured, and a build that fails on both
    assert results[1].failure.value == "INFEASIBLE" and "flops" in results[1].error
    assert results[2].failure.value == "INVALID_SPACE" and ex.restarts == 0  # the ranks stayed in step

    # Each rank saw a distinct shard of each epoch; together, the epoch; batch k of both = batch k at 2b.
    ranks = [json.loads((tmp_path / f"rows-0-{r}.json").read_text()) for r in (0, 1)]
    assert [r["world"] for r in ranks] == [2, 2]
    n, trial_seed = len(data.x_train), seed * 1_000_003 + 0
    for e in range(epochs):
        mine, theirs = ranks[0]["epochs"][e], ranks[1]["epochs"][e]
        assert not set(sum(mine, [])) & set(sum(theirs, []))
        assert sorted(sum(mine, []) + sum(theirs, [])) == list(range(n))
        order = shard_order(n, seed=trial_seed, epoch=e, rank=0, world=1)
        whole = [sorted(order[i:j].tolist()) for i, j in batch_spans(n, 2 * b)]
        assert [sorted(p + q) for p, q in zip(mine, theirs)] == whole

    # One process at batch 2b on the same rows, written out here: the same weights.
    torch.manual_seed(trial_seed)
    task = Task((8,), 3)
    model = MLP().build({"width": 16}, task)
    opt = make_optimizer(model, settings.for_trial(Trial(0, {"width": 16})))
    x, y = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
    for e in range(epochs):
        order = shard_order(n, seed=trial_seed, epoch=e, rank=0, world=1)
        for i, j in batch_spans(n, 2 * b):
            loss = torch.nn.functional.cross_entropy(model(x[order[i:j]]), y[order[i:j]])
            opt.zero_grad()
            loss.backward()
            opt.step()
    state = torch.load(io.BytesIO(ex.checkpoints.get(0)), weights_only=True)["model"]
    assert state.keys() == model.state_dict().keys()  # the module's own names (no DDP "module." prefix)
    for name, w in model.state_dict().items():
        torch.testing.assert_close(state[name], w, rtol=1e-4, atol=1e-5)
    with torch.no_grad():  # the validation the gang shared out, added up
        logits = model(torch.from_numpy(data.x_val))
        val_y = torch.from_numpy(data.y_val)
        assert result.metrics["val_acc"] == int((logits.argmax(1) == val_y).sum()) / len(val_y)
        assert result.metrics["val_loss"] == pytest.approx(
            float(torch.nn.functional.cross_entropy(logits, val_y)), rel=1e-4)


def test_nas_search_with_trial_workers_trains_each_trial_on_a_gang(ray_local, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["search", "--space", "toy", "--strategy", "random", "--budget", "3", "--workers", "1",
                 "--trial-workers", "2", "--gang-strategy", "pack", "--epochs", "2", "--batch-size", "32",
                 "--run-dir", str(run), "--quiet"]) == 0
    df = nas.load_results(run)
    assert len(df) == 3 and (df.state == "COMPLETE").all() and set(df.worker) == {"nas-gang-0-rank-0"}
    assert all(m["ranks"] == 2 and len(m["nodes"]) == 2 and m["epochs_trained"] == 2 for m in df.metrics)
    config = json.loads((run / "run.json").read_text())["execution"]
    assert config["trial_workers"] == 2 and config["gang_strategy"] == "PACK"
    assert "1 gang x 2 ranks, PACK" in format_status(run_status(run))
    assert (run / "best.pt").stat().st_size > 0  # rank 0's checkpoint: the module's own weights
    best = torch.load(run / "best.pt", weights_only=True)
    assert not any(k.startswith("module.") for k in best["model"])


class EpochLog:
    """Reports ``toy_score + epoch`` each epoch until told to stop; each rank writes the last epoch it trained."""

    def __init__(self, directory):
        self.directory = directory

    def __call__(self, ctx):
        last = 0
        for epoch in range(1, ctx.epochs + 1):
            last = epoch
            if ctx.report(epoch=epoch, val_acc=toy_score(ctx.trial.arch) + epoch):
                break
        Path(self.directory, f"last-{ctx.trial.trial_id}-{ctx.rank}").write_text(str(last))


def test_an_asha_stop_lands_on_every_rank_at_the_same_epoch(ray_local, tmp_path):
    settings = TrainSettings(epochs=9)  # ASHA's rungs: 1, 3, 9
    ex = GangExecutor(ToySpace(), None, settings, trial_workers=2, train=EpochLog(str(tmp_path)))
    try:
        df = nas.search(ToySpace(), "random", budget=8, executor=ex, data=None, seed=0, scheduler="asha",
                        settings=settings, run_dir=tmp_path / "run")
    finally:
        ex.shutdown()
    assert len(df) == 8 and (df.state == "COMPLETE").all()
    for row in df.itertuples():
        ranks = [int((tmp_path / f"last-{row.trial_id}-{r}").read_text()) for r in (0, 1)]
        assert ranks == [row.epochs, row.epochs]  # both ranks stopped where the journaled result did
    stopped = df[df.outcome == "STOPPED"]
    assert len(stopped) >= 3 and set(stopped.epochs) <= {1, 3} and set(df.epochs) - {1, 3} == {9}
    assert "(toy / random, budget 8, 1 gang x 2 ranks, PACK: actors nas-gang-<g>-rank-<r>)" in format_status(
        run_status(tmp_path / "run"))  # nas status


class RankBlocks:
    """Rank 1 of the first attempt of trial ``block`` says that it runs (the pids of both ranks, through the Signal
    ``started``) and blocks until killed; rank 0 goes on into its report (and waits there for rank 1)."""

    def __init__(self, directory, block):
        self.directory, self.block = directory, block

    def __call__(self, ctx):
        marker = Path(self.directory, f"attempted-{ctx.trial.trial_id}-{ctx.rank}")
        if ctx.trial.trial_id == self.block and not marker.exists():
            marker.touch()
            Path(self.directory, f"pid-{ctx.rank}").write_text(str(os.getpid()))
            if ctx.rank == 1:
                with open(Path(self.directory, "started"), "w") as f:
                    f.write(f"{os.getpid()}\n")
                threading.Event().wait()  # forever: only the kill ends this attempt
        ctx.report(epoch=1, val_acc=toy_score(ctx.trial.arch))


class KillRank(nas.Callback):
    """Once rank 0 reported trial ``block`` (it waits in the broadcast for rank 1 now), kills rank 1's process."""

    def __init__(self, wait, block):
        self.wait, self.block, self.killed = wait, block, []

    def on_event(self, status, event):
        if event.kind is EventKind.REPORT and event.trial.trial_id == self.block and not self.killed:
            pid = int(self.wait.wait())
            os.kill(pid, signal.SIGKILL)
            self.killed.append((event.trial.trial_id, pid))


@pytest.mark.parametrize("max_retries", [1, 0])
def test_a_rank_killed_mid_trial_retries_or_fails_the_trial_and_the_search_goes_on(ray_local, tmp_path, signals,
                                                                                    max_retries):
    started = signals("started")
    ex = GangExecutor(ToySpace(), None, trial_workers=2, train=RankBlocks(str(tmp_path), block=1),
                      max_retries=max_retries)
    killer = KillRank(started, block=1)
    try:
        df = nas.search(ToySpace(), "random", budget=4, executor=ex, data=None, seed=0, run_dir=tmp_path / "run",
                        callbacks=[killer])
    finally:
        ex.shutdown()
    assert len(df) == 4 and sorted(t.trial_id for t, _ in read_journal(tmp_path / "run")) == [0, 1, 2, 3]
    assert [t for t, _ in killer.killed] == [1] and ex.restarts == 1  # the kill landed mid-trial; one rebuild
    blocked = df.set_index("trial_id").loc[1]
    if max_retries:
        assert (df.state == "COMPLETE").all()  # trial 1 ran again on the rebuilt gang
    else:  # (the driver may hear first of rank 0's broadcast failing with it: it was recorded COLLECTIVE, naming
        # the survivor) retries spent, a dead rank is named as what ended the trial, whichever it heard of first
        assert blocked.state == "FAILED" and blocked.failure == "WORKER_LOST", (blocked.failure, blocked.error)
        assert blocked.error.startswith("nas-gang-0-rank-1 died; the trial ran 1 times"), blocked.error
        assert (df.set_index("trial_id").drop(1).state == "COMPLETE").all()
    rank0 = int((tmp_path / "pid-0").read_text())  # the killed rank's peer, which waited for it, is gone too
    with pytest.raises(ProcessLookupError):
        os.kill(rank0, 0)


class RankOneMisbehaves:
    """In trial ``raises`` rank 1 raises; in trial ``leaves`` it returns without a report (rank 0's report then
    waits in vain for it). Every other trial reports its toy score."""

    def __init__(self, raises, leaves):
        self.raises, self.leaves = raises, leaves

    def __call__(self, ctx):
        if ctx.rank == 1 and ctx.trial.trial_id == self.raises:
            raise RuntimeError("rank one broke")
        if ctx.rank == 1 and ctx.trial.trial_id == self.leaves:
            return
        ctx.report(epoch=1, val_acc=toy_score(ctx.trial.arch))


@pytest.mark.slow
def test_a_rank_that_fails_alone_or_stops_answering_fails_the_trial_with_a_typed_reason(ray_local, tmp_path):
    ex = GangExecutor(ToySpace(), None, trial_workers=2, train=RankOneMisbehaves(raises=1, leaves=3),
                      collective_timeout=5, max_retries=0)  # (with retries left, a COLLECTIVE failure runs again)
    try:
        df = nas.search(ToySpace(), "random", budget=5, executor=ex, data=None, seed=0, run_dir=tmp_path / "run")
    finally:
        ex.shutdown()
    by_id = df.set_index("trial_id")
    assert by_id.loc[1].failure == "ERROR" and by_id.loc[1].error.startswith("rank 1: RuntimeError: rank one broke")
    assert by_id.loc[3].failure == "COLLECTIVE" and "Timed out" in by_id.loc[3].error  # after collective_timeout
    assert (by_id.drop([1, 3]).state == "COMPLETE").all() and len(df) == 5
    assert ex.restarts == 2  # both gangs out of step were rebuilt


def test_a_strict_gang_strategy_the_cluster_cannot_place_is_refused_at_once(ray_local, tmp_path, capsys):
    """(STRICT_SPREAD with 2 ranks on one node waited the whole start_timeout, 120 s, then ended in a traceback.)
    The search is refused in one line before any actor starts; STRICT_PACK of the same gang fits the node."""
    args = ["search", "--space", "toy", "--dataset", "none", "--train-function", "nas.train.simple:noop",
            "--workers", "1", "--trial-workers", "2", "--budget", "1"]
    assert main([*args, "--gang-strategy", "STRICT_SPREAD", "--run-dir", str(tmp_path / "spread")]) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert said[-1] == ("nas search: error: gang_strategy STRICT_SPREAD puts each of a gang's 2 ranks on a node of its "
                        "own; the Ray cluster has 1 node(s) with room for one: use SPREAD or PACK, or fewer "
                        "trial_workers")
    assert not (tmp_path / "spread").exists()
    assert main([*args, "--gang-strategy", "STRICT_PACK", "--run-dir", str(tmp_path / "pack")]) == 0
