"""A worker's device side: its dataset on the device, the torch flags of a trial, building and measuring a
candidate there, and validation. :class:`nas.train.runner.TrialRunner` makes one where a worker has data.

Speed: the dataset is copied to the device once, when the worker starts (uint8 images stay uint8 there,
normalised per channel on the fly with the training split's mean and std); minibatches are index gathers on
the device, augmented there in batched torch ops (no DataLoader, no per-batch host copy). Where the dataset
exceeds ``data_budget_mb`` (default: half the GPU's free memory), it stays in host memory and a DataLoader
with ``loader_workers`` processes streams it instead: the worker logs so and each result's ``data_path``
metric says ``streaming`` (else ``device``). On CUDA: bf16 autocast where the GPU supports it (``amp``),
TF32 matmuls, cuDNN autotuning and channels-last convolutions. On CPU: ``threads`` torch threads while a
trial runs. Process-wide torch flags are set for a trial and restored.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from nas.core.space import SearchSpace
from nas.core.types import Arch, InvalidSpace
from nas.train.collective import collective_error
from nas.train.costs import measure_costs
from nas.train.data import Dataset
from nas.train.feed import DeviceFeed, StreamFeed, data_bytes, device_budget
from nas.train.settings import TrainSettings

log = logging.getLogger(__name__)


@contextlib.contextmanager
def must_run(arch: Any, what: str) -> Iterator[None]:
    """What the block raises, where a model that cannot work at all (a first layer of another width, weights on the
    meta device or in another precision) raised it, as an InvalidSpace error naming ``arch`` and ``what`` failed:
    the trial fails as INVALID_SPACE, as a wrong output does, so a search whose first trials all fail so stops (they
    failed as ERROR, and the search ran its whole budget). Running out of memory stays an OOM, a data-parallel gang's
    failed collective a COLLECTIVE.

    >>> with must_run({"d0": 1}, "cannot run on the task's input"):
    ...     torch.zeros(1, 3) @ torch.zeros(4, 2)
    Traceback (most recent call last):
    ...
    nas.core.types.InvalidSpace: the model of {'d0': 1} cannot run on the task's input: RuntimeError: mat1 and mat2 ...
    """
    try:
        yield
    except (RuntimeError, TypeError, ValueError, NotImplementedError) as e:
        if isinstance(e, torch.OutOfMemoryError) or "can't allocate memory" in str(e) or collective_error(e):
            raise
        raise InvalidSpace(f"the model of {arch} {what}: {type(e).__name__}: {e}") from e


class DeviceSide:
    """``data`` on the worker's device (``settings.device``: auto, cpu or cuda) and what trials do there."""

    eval_batch_size = 2048

    def __init__(self, data: Dataset, settings: TrainSettings) -> None:
        self.settings = settings
        self.task = data.task
        settings.check_data(data)
        want_cuda = settings.device == "cuda" or (settings.device == "auto" and torch.cuda.is_available())
        if want_cuda and not torch.cuda.is_available():
            raise RuntimeError("device='cuda' was asked for, but this worker sees no CUDA device")
        self.device = torch.device("cuda" if want_cuda else "cpu")
        cuda = self.device.type == "cuda"
        x_train = np.asarray(data.x_train)
        self.memory_format = (
            torch.channels_last if settings.channels_last and cuda and x_train.ndim == 4 else torch.contiguous_format
        )
        arrays = (x_train, np.asarray(data.y_train), np.asarray(data.x_val), np.asarray(data.y_val))
        size, budget = data_bytes(*arrays), device_budget(self.device, settings.data_budget_mb)
        self.feed: DeviceFeed
        if size <= budget:
            # The whole dataset lives on the device once, stored channels-last where that applies, so that
            # every gathered minibatch already is.
            self.feed = DeviceFeed(*arrays, self.device, self.memory_format)
        else:
            self.feed = StreamFeed(*arrays, self.device, self.memory_format, workers=settings.loader_workers)
            log.warning("dataset %s (%.0f MiB) exceeds the device data budget (%.0f MiB): streaming it from host "
                        "memory with %d DataLoader workers", data.name, size / 2**20, budget / 2**20,
                        settings.loader_workers)
        self._probe = self.feed.prepare(torch.from_numpy(x_train[:2].copy()).to(self.device)).cpu()
        self.autocast_on = settings.amp and cuda and torch.cuda.is_bf16_supported()
        with self.flags():
            self._warm_up()

    @contextlib.contextmanager
    def flags(self) -> Iterator[None]:
        """Thread count (CPU) and cuDNN autotuning + TF32 matmuls (CUDA) for the duration of a trial; torch's
        default dtype and grad mode as they were before it (a training function's ``set_default_dtype(float64)``
        failed every later trial of its worker, in-process the caller's own code too)."""
        threads, dtype, grad = torch.get_num_threads(), torch.get_default_dtype(), torch.is_grad_enabled()
        benchmark, precision = torch.backends.cudnn.benchmark, torch.get_float32_matmul_precision()
        if self.settings.threads is not None:
            torch.set_num_threads(self.settings.threads)
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = True  # a search trains the same shapes over and over
            torch.set_float32_matmul_precision("high")  # TF32 on Ampere and later for the fp32 paths
        try:
            yield
        finally:
            if torch.get_num_threads() != threads:
                torch.set_num_threads(threads)
            if torch.get_default_dtype() != dtype:
                torch.set_default_dtype(dtype)
            torch.set_grad_enabled(grad)
            torch.backends.cudnn.benchmark = benchmark
            torch.set_float32_matmul_precision(precision)

    def _warm_up(self) -> None:
        """Pay torch's one-off costs (the first optimizer step imports a lot: ~2 s; CUDA context and
        kernels) when the worker starts, not inside the first trial's timing."""
        layer = torch.nn.Linear(2, 1).to(self.device)
        opt = torch.optim.Adam(layer.parameters(), fused=True)
        with self.autocast():
            out = layer(torch.zeros(1, 2, device=self.device)).float().sum()
        out.backward()
        opt.step()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.autocast_on:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def build(self, arch: Arch, space: SearchSpace) -> tuple[torch.nn.Module, int]:
        """The candidate on the device (lazy modules materialised) and its parameter count; one that cannot be moved
        there (weights on the meta device) is an InvalidSpace error (:func:`must_run`)."""
        model = space.check_build(arch, self.task)
        if any(torch.nn.parameter.is_lazy(p) for p in model.parameters()):
            with torch.no_grad(), must_run(arch, f"cannot run on the task's input ({self._probe_said()})"):
                model.eval()  # (materialise lazy modules before counting or moving parameters)
                model(self._probe)
        n_params = sum(p.numel() for p in model.parameters())
        with must_run(arch, f"cannot be moved to {self.device}"):
            return model.to(self.device, memory_format=self.memory_format), n_params  # type: ignore[call-overload]

    def _probe_said(self) -> str:
        return f"an example of shape {tuple(self._probe.shape[1:])}, {self._probe.dtype}"

    def measure(self, model: torch.nn.Module, n_params: int, batch_size: int, arch: Arch | None = None
                ) -> dict[str, Any]:
        """The model's costs on this device (:func:`nas.train.costs.measure_costs`), or only its parameters
        where ``measure_costs`` is off."""
        if not self.settings.measure_costs:
            return {"params": n_params}
        with must_run(arch, f"cannot run on the task's input "
                      f"({self._probe_said()}; its costs are measured before it trains)"):
            costs = measure_costs(model, tuple(self._probe.shape[1:]), device=self.device, batch_size=batch_size,
                                  warmup=2, repeats=self.settings.cost_repeats, autocast=self.autocast_on,
                                  memory_format=self.memory_format)
        return costs.to_dict()

    def normalization(self) -> dict[str, list[float]] | None:
        """The per-channel mean and std (pixel units) the inputs are normalised with; None for float data."""
        norm = self.feed.normalize
        return None if norm is None else {"mean": norm.mean, "std": norm.std}

    def evaluate(self, model: torch.nn.Module) -> tuple[float, float]:
        """Validation loss and accuracy, summed on the device and read once."""
        loss, right = self.eval_sums(model, self.feed.val_batches(self.eval_batch_size)).tolist()  # one device sync
        return loss / self.feed.n_val, int(right) / self.feed.n_val

    @torch.no_grad()
    def eval_sums(self, model: torch.nn.Module, batches: Iterator[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """The summed loss and the count of right answers over ``batches``, on the device (float64, shape (2,))."""
        model.eval()
        loss_sum = torch.zeros((), device=self.device)
        correct = torch.zeros((), dtype=torch.int64, device=self.device)
        for x, y in batches:
            with self.autocast():
                logits = model(x)
            loss_sum += torch.nn.functional.cross_entropy(logits.float(), y, reduction="sum")
            correct += (logits.argmax(1) == y).sum()
        return torch.stack([loss_sum.double(), correct.double()])


__all__ = ["DeviceSide"]
