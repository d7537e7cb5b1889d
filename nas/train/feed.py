"""Minibatches for the trainer: from tensors resident on the device, or streamed from host memory by a
torch DataLoader with worker processes when the dataset does not fit the device's memory budget.

Either way a training batch arrives on the device as the model wants it: gathered (uint8 images stay uint8,
4x smaller than float32), augmented on the device (:mod:`nas.train.augment`), normalised per channel with
the training split's mean and std, in the trainer's memory format.

>>> import numpy as np, torch
>>> x = np.random.default_rng(0).integers(0, 256, (10, 3, 4, 4), dtype=np.uint8)
>>> feed = DeviceFeed(x, np.arange(10) % 2, x[:4], np.arange(4) % 2, torch.device("cpu"))
>>> [tuple(xb.shape) for xb, _ in feed.train_batches(4, Augment(flip=True))]
[(4, 3, 4, 4), (4, 3, 4, 4), (2, 3, 4, 4)]
>>> feed.streaming, round(float(next(feed.val_batches(4))[0].mean()), 2)
(False, 0.07)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from nas.train.augment import Augment, Normalize, channel_stats

Batch = tuple[torch.Tensor, torch.Tensor]


def train_order(n: int, batch_size: int, device: torch.device) -> tuple[torch.Tensor, list[tuple[int, int]]]:
    """A random permutation and the (start, stop) of each batch; a last batch of one sample is dropped
    (it cannot train BatchNorm)."""
    bs = min(batch_size, n)
    end = n - 1 if n > 1 and n % bs == 1 else n
    return torch.randperm(n, device=device), [(i, min(i + bs, end)) for i in range(0, end, bs)]


class DeviceFeed:
    """The whole dataset on the device once: minibatches are index gathers there (no host copy per step)."""

    streaming = False

    def __init__(self, x_train: np.ndarray, y_train: np.ndarray, x_val: np.ndarray, y_val: np.ndarray,
                 device: torch.device, memory_format: torch.memory_format = torch.contiguous_format) -> None:
        self.device, self.memory_format = device, memory_format
        self.channels_last = memory_format == torch.channels_last
        self.images = x_train.dtype == np.uint8
        self.normalize = Normalize(*channel_stats(x_train), device) if self.images else None
        self.n_train, self.n_val = len(x_train), len(x_val)
        self._put(x_train, y_train, x_val, y_val)

    def _put(self, x_train: np.ndarray, y_train: np.ndarray, x_val: np.ndarray, y_val: np.ndarray) -> None:
        def dev(a: np.ndarray, images: bool = True) -> torch.Tensor:
            t = torch.from_numpy(np.asarray(a)).to(self.device)
            return t.contiguous(memory_format=self.memory_format) if images and t.dim() == 4 else t

        self.x_train, self.y_train = dev(x_train), dev(y_train, False)
        self.x_val, self.y_val = dev(x_val), dev(y_val, False)

    def prepare(self, x: torch.Tensor, augment: Augment | None = None) -> torch.Tensor:
        """A gathered batch on the device -> the model's input: augmented (training) and normalised."""
        if augment is not None and augment.active:
            x = augment.uint8_ops(x)
        x = self.normalize(x) if self.normalize is not None else x
        if augment is not None and augment.cutout:
            x = augment.float_ops(x)
        # channels-last where the trainer asked for it (CUDA); elsewhere the layout the ops left (the crop's
        # gather yields channels-last strides, which CPU convolutions also run faster on)
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last and x.dim() == 4 else x

    def train_batches(self, batch_size: int, augment: Augment | None = None) -> Iterator[Batch]:
        order, spans = train_order(self.n_train, batch_size, self.device)
        yield from self.gather([order[i:j] for i, j in spans], augment)

    def gather(self, batches: Sequence[torch.Tensor], augment: Augment | None = None) -> Iterator[Batch]:
        """The training batches made of these rows (one index tensor per batch), ready for the model."""
        for idx in batches:
            yield self.prepare(self.x_train[idx], augment), self.y_train[idx]

    def val_batches(self, batch_size: int, rows: slice = slice(None)) -> Iterator[Batch]:
        """The validation split (or its ``rows``, a contiguous slice) in batches."""
        lo, hi, _ = rows.indices(self.n_val)
        for i in range(lo, hi, batch_size):
            j = min(i + batch_size, hi)
            yield self.prepare(self.x_val[i:j]), self.y_val[i:j]

    def train_samples(self, batch_size: int) -> int:
        """Samples one epoch trains on (all but a dropped last batch of one)."""
        bs = min(batch_size, self.n_train)
        return self.n_train - 1 if self.n_train > 1 and self.n_train % bs == 1 else self.n_train


class _Gather(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Item = a whole batch: the index array's rows of x and y, gathered in a worker process."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, idx: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.from_numpy(self.x[idx]), torch.from_numpy(self.y[idx])


class StreamFeed(DeviceFeed):
    """The dataset stays in host memory; a DataLoader with ``workers`` processes gathers batches (in pinned
    memory on CUDA) and each is copied to the device, then augmented and normalised there as above."""

    streaming = True

    def __init__(self, x_train: np.ndarray, y_train: np.ndarray, x_val: np.ndarray, y_val: np.ndarray,
                 device: torch.device, memory_format: torch.memory_format = torch.contiguous_format, *,
                 workers: int = 2) -> None:
        self.workers = workers
        super().__init__(x_train, y_train, x_val, y_val, device, memory_format)

    def _put(self, x_train: np.ndarray, y_train: np.ndarray, x_val: np.ndarray, y_val: np.ndarray) -> None:
        self.train_set, self.val_set = _Gather(x_train, y_train), _Gather(x_val, y_val)

    def _load(self, data: _Gather, batches: Sequence[Any]) -> Iterator[Batch]:
        loader = torch.utils.data.DataLoader(data, batch_size=None, sampler=batches, num_workers=self.workers,
                                             pin_memory=self.device.type == "cuda")
        for x, y in loader:
            yield x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def train_batches(self, batch_size: int, augment: Augment | None = None) -> Iterator[Batch]:
        order, spans = train_order(self.n_train, batch_size, torch.device("cpu"))
        yield from self.gather([order[i:j] for i, j in spans], augment)

    def gather(self, batches: Sequence[torch.Tensor], augment: Augment | None = None) -> Iterator[Batch]:
        for x, y in self._load(self.train_set, [np.sort(idx.cpu().numpy()) for idx in batches]):
            yield self.prepare(x, augment), y

    def val_batches(self, batch_size: int, rows: slice = slice(None)) -> Iterator[Batch]:
        lo, hi, _ = rows.indices(self.n_val)
        spans = [slice(i, min(i + batch_size, hi)) for i in range(lo, hi, batch_size)]
        for x, y in self._load(self.val_set, spans):
            yield self.prepare(x), y


def data_bytes(*arrays: np.ndarray) -> int:
    return sum(int(np.asarray(a).nbytes) for a in arrays)


def device_budget(device: torch.device, budget_mb: float | None) -> float:
    """Bytes of data the device may hold: ``budget_mb`` where given; else on CUDA half the memory free
    when the worker starts, on CPU no limit (the data already is in host memory)."""
    if budget_mb is not None:
        return budget_mb * 2**20
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0] / 2
    return float("inf")
