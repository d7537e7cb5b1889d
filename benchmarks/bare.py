"""The bare PyTorch loop that ``nas bench train`` measures our trainer against, and the phase marks both sides
are timed with.

Like-for-like by construction, so that the two runs differ only in the code around the model:

- the same seed right before the model is built (the trainer's per-trial seed), hence the same initial weights;
- the same ``randperm`` per epoch, hence the same batches (a last batch of one sample is dropped, as the
  trainer does: it cannot train BatchNorm);
- the same augmentation ops (:mod:`nas.train.augment`) drawing from the same generator in the same order, and
  the same per-channel normalisation of uint8 images with the training split's mean and std;
- the same optimizer: Adam with its fused kernel (the trainer's choice; torch's default for-loop Adam rounds
  differently, and after a few epochs two otherwise identical runs then end at visibly different accuracies);
- on CUDA the same bf16 autocast, channels-last layout, cuDNN autotuning and TF32 matmuls as the trainer.

On the CPU two such runs end with bit-identical weights: the bench prints the largest weight difference, so
a drift in either loop (seeding, batch order, an op) shows at once. Cuda kernels are not bitwise
deterministic (cuDNN autotuning picks algorithms per run), so there the weights agree only approximately.

:class:`Marks` splits a run into start-up (the call until the model's first training forward: building the
model and optimizer, and for the bare loop the data's channel statistics), the loop (that first forward until
the end of the last validation forward: what samples/s is computed over) and the end (until the call returns:
our trainer serialises its checkpoint there), by forward hooks on the model, the same on both sides.

>>> import torch
>>> marks = Marks(torch.device("cpu"))
>>> model = torch.nn.Linear(2, 1)
>>> marks.start(); marks.attach(model)
>>> _ = model(torch.zeros(1, 2)); _ = model.eval()(torch.zeros(1, 2))
>>> p = marks.stop(); p.start_wall >= 0 and p.loop_wall >= 0 and p.end_wall >= 0
True
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Any

import torch

from nas.core.space import SearchSpace
from nas.core.types import Arch
from nas.train.augment import Augment, Normalize, channel_stats


def _now() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


@dataclasses.dataclass(frozen=True)
class Phases:
    """Wall and CPU seconds of one run's start-up, loop and end (see the module docstring)."""

    start_wall: float
    start_cpu: float
    loop_wall: float
    loop_cpu: float
    end_wall: float
    end_cpu: float


class Marks:
    """Timestamps (wall, CPU) at the call, the model's first training forward, the end of its last
    validation (eval-mode) forward, and the return. On CUDA the eval-mode hook waits for the device, so that
    the loop's end is when its work is done, not when it was queued."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.t0: tuple[float, float] | None = None
        self.first: tuple[float, float] | None = None
        self.last: tuple[float, float] | None = None

    def start(self) -> None:
        self.t0, self.first, self.last = _now(), None, None

    def attach(self, model: torch.nn.Module) -> None:
        def before(module: torch.nn.Module, args: Any) -> None:
            if self.first is None and module.training:
                self.first = _now()

        def after(module: torch.nn.Module, args: Any, out: Any) -> None:
            if not module.training:
                if self.cuda:
                    torch.cuda.synchronize()
                self.last = _now()

        model.register_forward_pre_hook(before)
        model.register_forward_hook(after)

    def stop(self) -> Phases:
        end = _now()
        if self.t0 is None or self.first is None or self.last is None:
            raise RuntimeError("no training and validation forward was seen: the model the marks were attached to "
                               "is not the one that trained")
        t0, first, last = self.t0, self.first, self.last
        return Phases(first[0] - t0[0], first[1] - t0[1], last[0] - first[0], last[1] - first[1],
                      end[0] - last[0], end[1] - last[1])


@contextlib.contextmanager
def cuda_flags(device: torch.device) -> Any:
    """cuDNN autotuning and TF32 matmuls on CUDA for the duration (as the trainer sets them), then restored."""
    benchmark, precision = torch.backends.cudnn.benchmark, torch.get_float32_matmul_precision()
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.set_float32_matmul_precision("high")
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = benchmark
        torch.set_float32_matmul_precision(precision)


def bare_loop(space: SearchSpace, arch: Arch, data: dict[str, torch.Tensor], task: Any, *, epochs: int,
              batch_size: int, lr: float, seed: int, augment: Augment | None = None, amp: bool = False,
              channels_last: bool = False, marks: Marks | None = None) -> tuple[float, dict[str, torch.Tensor]]:
    """The plain loop a user writes; ``data`` is already on the device. Returns the last epoch's validation
    accuracy and the final weights (CPU tensors)."""
    x, y, x_val, y_val = data["x_train"], data["y_train"], data["x_val"], data["y_val"]
    device = x.device
    if marks is not None:
        marks.start()
    norm = Normalize(*channel_stats(x.cpu().numpy()), device) if x.dtype == torch.uint8 else None
    layout = torch.channels_last if channels_last else torch.contiguous_format
    autocast: Any = (torch.autocast(device.type, dtype=torch.bfloat16) if amp else contextlib.nullcontext())

    def prep(xb: torch.Tensor, train: bool) -> torch.Tensor:
        if train and augment is not None:
            xb = augment.uint8_ops(xb)
        xb = norm(xb) if norm is not None else xb
        xb = augment.float_ops(xb) if train and augment is not None else xb
        return xb.contiguous(memory_format=layout) if channels_last else xb

    torch.manual_seed(seed)
    model = space.build(arch, task).to(device, memory_format=layout)  # type: ignore[call-overload]
    if marks is not None:
        marks.attach(model)
    opt = torch.optim.Adam(model.parameters(), lr=lr, fused=True)
    n, acc = len(x), 0.0
    bs = min(batch_size, n)
    end = n - 1 if n > 1 and n % bs == 1 else n  # a last batch of one sample cannot train BatchNorm
    with cuda_flags(device):
        for _ in range(epochs):
            model.train()
            perm = torch.randperm(n, device=device)
            for i in range(0, end, bs):
                idx = perm[i : min(i + bs, end)]
                with autocast:
                    loss = torch.nn.functional.cross_entropy(model(prep(x[idx], True)), y[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
            model.eval()
            correct = 0
            with torch.no_grad():
                for i in range(0, len(x_val), 2048):
                    with autocast:
                        logits = model(prep(x_val[i : i + 2048], False))
                    correct += int((logits.argmax(1) == y_val[i : i + 2048]).sum())
            acc = correct / len(x_val)
    return acc, {k: v.detach().cpu() for k, v in model.state_dict().items()}


def max_weight_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """The largest absolute difference between two state dicts' floating tensors (inf if their keys differ)."""
    if a.keys() != b.keys():
        return float("inf")
    diffs = [float((a[k].float() - b[k].float()).abs().max()) for k in a if a[k].is_floating_point() and a[k].numel()]
    return max(diffs, default=0.0)
