"""One rank's share of the data on a data-parallel gang: ``ctx.data`` there (:mod:`nas.train.gang`).

Every rank draws the same permutation of the training split for each epoch (from the trial's seed and the
epoch, whatever else consumed random numbers) and takes every ``world``-th row of it from its rank on, as
torch's ``DistributedSampler`` does; the last ``n mod world`` rows of the permutation are left out of that
epoch so that every rank trains the same number of steps (they differ from epoch to epoch). So each rank sees a
distinct shard, the shards' union is the epoch, and batch ``k`` of the ranks together, at a batch size of ``b``
per rank, is batch ``k`` of one process at ``world x b`` on the same permutation: with the gradients averaged
(DDP) the ranks train as that one process would.

>>> order = [shard_order(10, seed=1, epoch=0, rank=r, world=2).tolist() for r in (0, 1)]
>>> sorted(order[0] + order[1]) == list(range(10)), set(order[0]) & set(order[1])
(True, set())
>>> full = shard_order(10, seed=1, epoch=0, rank=0, world=1).tolist()
>>> full[:4] == [order[0][0], order[1][0], order[0][1], order[1][1]]   # rank batches of 1 = batch of 2 there
True

The validation split is shared out in contiguous slices: each rank evaluates its own and the gang adds up the
sums (:meth:`nas.train.gang.Gang.evaluate`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from nas.train.augment import Augment
from nas.train.feed import Batch, DeviceFeed


def shard_order(n: int, *, seed: int, epoch: int, rank: int, world: int) -> torch.Tensor:
    """The rows (CPU int64) that ``rank`` of ``world`` trains on in ``epoch``, in order (see the module docstring)."""
    g = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, epoch]).generate_state(1)[0]))
    perm = torch.randperm(n, generator=g)
    return perm[rank : n - n % world : world]


def batch_spans(n: int, batch_size: int) -> list[tuple[int, int]]:
    """(start, stop) of each batch of ``n`` rows; a last batch of one row is dropped (it cannot train BatchNorm),
    as :func:`nas.train.feed.train_order` does."""
    bs = min(batch_size, n)
    end = n - 1 if n > 1 and n % bs == 1 else n
    return [(i, min(i + bs, end)) for i in range(0, end, bs)]


class ShardedFeed:
    """``feed`` (the rank's :class:`nas.train.feed.DeviceFeed`, which holds the whole dataset) seen by ``rank`` of
    ``world``: :meth:`train_batches` takes the batch size PER RANK; ``n_train`` and ``n_val`` are this rank's rows."""

    def __init__(self, feed: DeviceFeed, *, rank: int, world: int, seed: int) -> None:
        if feed.n_train < world:
            raise ValueError(f"the training split has {feed.n_train} rows, fewer than the gang's {world} ranks")
        self.feed, self.rank, self.world, self.seed = feed, rank, world, seed
        self.epoch = 0  # train_batches calls so far: the next one's permutation
        self.n_train = feed.n_train // world
        self._val = slice(rank * feed.n_val // world, (rank + 1) * feed.n_val // world)
        self.n_val = self._val.stop - self._val.start
        self.total_val = feed.n_val

    @property
    def streaming(self) -> bool:
        return self.feed.streaming

    @property
    def normalize(self) -> Any:
        return self.feed.normalize

    def prepare(self, x: torch.Tensor, augment: Augment | None = None) -> torch.Tensor:
        return self.feed.prepare(x, augment)

    def train_batches(self, batch_size: int, augment: Augment | None = None) -> Iterator[Batch]:
        """This rank's batches of ``batch_size`` rows for the next epoch (its shard of that epoch's permutation)."""
        rows = shard_order(self.feed.n_train, seed=self.seed, epoch=self.epoch, rank=self.rank, world=self.world)
        self.epoch += 1
        if not self.feed.streaming:
            rows = rows.to(self.feed.device)
        yield from self.feed.gather([rows[i:j] for i, j in batch_spans(len(rows), batch_size)], augment)

    def train_samples(self, batch_size: int) -> int:
        """Rows this rank trains on per epoch (a dropped last batch of one excluded)."""
        spans = batch_spans(self.n_train, batch_size)
        return spans[-1][1] if spans else 0

    def val_batches(self, batch_size: int) -> Iterator[Batch]:
        """This rank's slice of the validation split."""
        yield from self.feed.val_batches(batch_size, self._val)


__all__ = ["ShardedFeed", "batch_spans", "shard_order"]
