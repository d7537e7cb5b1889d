"""Data-parallel trials without Ray: each rank's shard of the data, and the configuration's checks.
(The gangs themselves, on a real Ray cluster: tests/test_gang_ray.py and tests/test_gang_cluster.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nas.cli import main
from nas.engine.protocol import ExecutorConfig, build_executor
from nas.run.config import RunConfig
from nas.search_spaces.toy import ToySpace
from nas.train.collective import collective_error
from nas.train.feed import DeviceFeed, StreamFeed
from nas.train.shard import ShardedFeed, batch_spans, shard_order


@pytest.mark.parametrize(("n", "world"), [(10, 2), (11, 2), (97, 4), (5, 5)])
def test_each_rank_gets_a_distinct_equal_shard_and_together_the_epoch(n, world):
    for epoch in range(3):
        shards = [shard_order(n, seed=7, epoch=epoch, rank=r, world=world) for r in range(world)]
        rows = torch.cat(shards)
        assert len({len(s) for s in shards}) == 1 and len(rows) == n - n % world  # equal steps on every rank
        assert len(set(rows.tolist())) == len(rows)  # distinct
        whole = shard_order(n, seed=7, epoch=epoch, rank=0, world=1)
        assert set(rows.tolist()) == set(whole[: len(rows)].tolist())  # the epoch, but n mod world rows
    assert not torch.equal(shard_order(n, seed=7, epoch=0, rank=0, world=1),
                           shard_order(n, seed=7, epoch=1, rank=0, world=1)) or n < 3  # a new order each epoch
    assert torch.equal(shard_order(n, seed=7, epoch=2, rank=1 % world, world=world),
                       shard_order(n, seed=7, epoch=2, rank=1 % world, world=world))  # the same on every call


def feeds(n=48, n_val=13, streaming=False):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    x[:, 0] = np.arange(n)  # each row says which it is
    xv = rng.normal(size=(n_val, 4)).astype(np.float32)
    xv[:, 0] = np.arange(n_val)
    args = (x, np.arange(n) % 3, xv, np.arange(n_val) % 3, torch.device("cpu"))
    return StreamFeed(*args, workers=0) if streaming else DeviceFeed(*args)


@pytest.mark.parametrize("streaming", [False, True])
def test_rank_batches_of_b_together_make_the_batches_of_one_process_at_world_times_b(streaming):
    world, b = 2, 4
    ranks = [ShardedFeed(feeds(streaming=streaming), rank=r, world=world, seed=3) for r in range(world)]
    whole = ShardedFeed(feeds(streaming=streaming), rank=0, world=1, seed=3)
    for _ in range(2):  # two epochs
        per_rank = [[x[:, 0].long().tolist() for x, _ in feed.train_batches(b)] for feed in ranks]
        together = [x[:, 0].long().tolist() for x, _ in whole.train_batches(world * b)]
        assert len(per_rank[0]) == len(per_rank[1]) == len(together) == 6
        assert [sorted(p0 + p1) for p0, p1 in zip(*per_rank)] == [sorted(t) for t in together]
        assert not set(sum(per_rank[0], [])) & set(sum(per_rank[1], []))
    assert ranks[0].train_samples(b) == 24 and ranks[0].n_train == 24
    val = [x[:, 0].long().tolist() for feed in ranks for x, _ in feed.val_batches(5)]
    assert sum(val, []) == list(range(13)) and [feed.n_val for feed in ranks] == [6, 7]  # every row once


def test_a_last_batch_of_one_row_is_dropped_on_every_rank_alike():
    assert batch_spans(9, 4) == [(0, 4), (4, 8)] and batch_spans(10, 4) == [(0, 4), (4, 8), (8, 10)]
    feed = ShardedFeed(feeds(n=18), rank=1, world=2, seed=0)  # 9 rows per rank at 4: 4 + 4, the ninth dropped
    assert [len(y) for _, y in feed.train_batches(4)] == [4, 4] and feed.train_samples(4) == 8


def test_a_training_split_smaller_than_the_gang_is_refused():
    with pytest.raises(ValueError, match="the training split has 3 rows, fewer than the gang's 4 ranks"):
        ShardedFeed(feeds(n=3), rank=0, world=4, seed=0)


def test_gang_options_are_checked_where_they_are_given(capsys):
    assert RunConfig.from_mapping({"trial_workers": 2, "gang_strategy": "spread"}).execution.gang_strategy == "SPREAD"
    with pytest.raises(ValueError, match="'gang_strategy' must be one of PACK, SPREAD, STRICT_PACK, STRICT_SPREAD, "
                                         "got 'diagonal'"):
        RunConfig.from_mapping({"gang_strategy": "diagonal"})
    with pytest.raises(ValueError, match="'trial_workers' must be an integer >= 1, got 0"):
        RunConfig.from_mapping({"trial_workers": 0})
    with pytest.raises(ValueError, match="trial_workers=2 .* needs executor 'ray', not 'inprocess'"):
        RunConfig.from_mapping({"trial_workers": 2, "executor": "inprocess"})
    with pytest.raises(ValueError, match="need the ray executor, not 'simulated'"):
        build_executor("simulated", ExecutorConfig(ToySpace(), trial_workers=2))
    assert main(["search", "--trial-workers", "2", "--executor", "inprocess", "--budget", "1"]) == 2
    err = capsys.readouterr().err
    assert "needs executor 'ray'" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_search_help_lists_the_gang_flags(capsys):
    with pytest.raises(SystemExit):
        main(["search", "--help"])
    out = capsys.readouterr().out
    assert "--trial-workers" in out and "--gang-strategy" in out


def test_collective_failures_are_told_from_the_trainings_own():
    assert collective_error(RuntimeError("[gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 2000ms for recv"))
    assert collective_error(RuntimeError("Connection closed by peer [127.0.0.1]:4242"))
    assert not collective_error(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not collective_error(ValueError("gloo"))
