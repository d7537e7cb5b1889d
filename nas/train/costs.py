"""What a built model costs on the worker's device (the constraints checked on it BEFORE it trains are
:mod:`nas.train.constraints`).

:func:`measure_costs` measures a model once it is built: its parameters, the FLOPs of one forward pass
of one example (``torch.utils.flop_counter.FlopCounterMode``: a multiply-add counts 2), its inference
latency (the median of several timed forward passes after warm-up, at batch 1 and at the training batch
size, with ``torch.cuda.synchronize`` around each pass on CUDA) and, where the device reports it
(CUDA), the peak memory those passes allocated. :class:`nas.train.constraints.Constraints` turns
``--max-params``, ``--max-flops`` and ``--max-latency-ms`` into a check of these whose ``Violation`` names the
measured value and the limit, so the trial is an INFEASIBLE failure that trained nothing.

>>> import torch
>>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
>>> costs = measure_costs(model, (1, 8, 8), device="cpu", batch_size=32, repeats=3)
>>> costs.params, costs.flops, costs.peak_memory_mb, costs.latency_ms > 0
(650, 1280, None, True)
>>> from nas.train.constraints import Constraints
>>> print(Constraints(max_params=500).check(costs.to_dict()))
params 650 > max_params 500
>>> Constraints(max_params=1000, max_flops=1e6).check(costs.to_dict()) is None
True
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import time
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode


@dataclasses.dataclass(frozen=True)
class Costs:
    """Measured costs of one model on one device (``latency_*`` in milliseconds, memory in MiB)."""

    params: int
    flops: int  # one forward pass of one example
    latency_ms: float  # median, batch 1
    latency_batch_ms: float  # median, ``batch_size`` examples
    batch_size: int
    peak_memory_mb: float | None  # None where the device does not report it (CPU)
    device: str

    def to_dict(self) -> dict[str, Any]:
        """The metrics a result carries (names as in ``--objective`` and the constraints)."""
        return dataclasses.asdict(self)


def count_params(model: torch.nn.Module) -> int:
    """Every parameter element (lazy modules must have run a forward pass first)."""
    return sum(p.numel() for p in model.parameters())


@contextlib.contextmanager
def inference(model: torch.nn.Module) -> Iterator[None]:
    """Eval mode without autograd for the measurement, then the model's own mode back."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def count_flops(model: torch.nn.Module, example: torch.Tensor) -> int:
    """FLOPs of ``model(example)``, counted by torch's FlopCounterMode."""
    with inference(model), FlopCounterMode(display=False) as counter:
        model(example)
    return int(counter.get_total_flops())


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_forward(model: torch.nn.Module, example: torch.Tensor, *, warmup: int = 3, repeats: int = 10,
                 autocast: bool = False) -> float:
    """The median wall time of ``model(example)`` in ms, over ``repeats`` passes after ``warmup``."""
    device = example.device
    amp = torch.autocast(device.type, dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    times = []
    with inference(model), amp:
        for i in range(warmup + repeats):
            _sync(device)
            start = time.perf_counter()
            model(example)
            _sync(device)
            if i >= warmup:
                times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


def measure_costs(model: torch.nn.Module, input_shape: Sequence[int], *, device: str | torch.device = "cpu",
                  batch_size: int = 64, warmup: int = 3, repeats: int = 10, autocast: bool = False,
                  memory_format: torch.memory_format = torch.contiguous_format) -> Costs:
    """Measure ``model`` (already on ``device``) on random inputs of ``input_shape`` (without the batch).

    ``autocast``: time under bf16 autocast, as the trainer trains; the FLOP count does not depend on it.
    """
    if batch_size < 1 or warmup < 0 or repeats < 1:
        raise ValueError(f"need batch_size >= 1, warmup >= 0, repeats >= 1; got {batch_size}, {warmup}, {repeats}")
    device = torch.device(device)
    gen = torch.Generator().manual_seed(0)
    one = torch.randn(1, *input_shape, generator=gen)
    batch = torch.randn(batch_size, *input_shape, generator=gen)
    if one.dim() == 4:
        one, batch = one.contiguous(memory_format=memory_format), batch.contiguous(memory_format=memory_format)
    one, batch = one.to(device), batch.to(device)
    flops = count_flops(model, one)  # first: it also materialises lazy modules
    params = count_params(model)
    latency = time_forward(model, one, warmup=warmup, repeats=repeats, autocast=autocast)
    with peak_memory(device) as peak:
        latency_batch = time_forward(model, batch, warmup=warmup, repeats=repeats, autocast=autocast)
    return Costs(params=params, flops=flops, latency_ms=latency, latency_batch_ms=latency_batch,
                 batch_size=batch_size, peak_memory_mb=peak.mb, device=device.type)


class PeakMemory:
    """The peak memory allocated inside a :func:`peak_memory` block, in MiB, or None where unreported."""

    mb: float | None = None


@contextlib.contextmanager
def peak_memory(device: str | torch.device) -> Iterator[PeakMemory]:
    """Measure the peak allocated memory of the block on CUDA (``torch.cuda.max_memory_allocated``);
    elsewhere ``mb`` stays None. The trainer can wrap training in it too."""
    device = torch.device(device)
    peak = PeakMemory()
    if device.type != "cuda":
        yield peak
        return
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    try:
        yield peak
    finally:
        torch.cuda.synchronize(device)
        peak.mb = torch.cuda.max_memory_allocated(device) / 2**20


__all__ = ["Costs", "PeakMemory", "count_flops", "count_params", "measure_costs", "peak_memory", "time_forward"]
