"""Sub-network evaluation with a trained supernet's weights, as a training function of the one trial contract.

:class:`SupernetEval` is a ``train(ctx)`` (:mod:`nas.train.context`): the worker has already built the trial's
architecture as a standalone network (``ctx.model``), measured its costs and checked its constraints; this
function copies the supernet's weights for that architecture into it
(:meth:`nas.core.weight_sharing.Supernet.subnet_state`), optionally fine-tunes it ``finetune_steps`` steps,
recalibrates its batch-norm statistics on ``bn_batches`` training batches (the supernet's running statistics
mix every path's: Guo et al. 2020, Sec. 3.3), and reports its validation accuracy and loss. So every strategy,
scheduler, objective (the measured params, FLOPs and latency of the sub-network) and constraint works as it
does for trained trials, on any executor.

The supernet's weights are read once per worker process (a cache keyed by the weights file, its SHA-256 and the
device) and checked against the hash read when the search began, and each trial checks that the file is still
that one: a supernet retrained meanwhile fails the trial with SUPERNET_CHANGED, and the loop stops the search
there rather than mix two supernets in one search or fail every later trial. The batch-norm batches are the same for
every trial (a fixed seed), so two evaluations of one architecture give the same figures.

``nas.search(..., supernet=DIR)`` runs a search with it (or pass ``train=SupernetEval(DIR, ...)``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from nas.core.spec import resolve_space_spec
from nas.core.types import FailureKind, SupernetChanged
from nas.train.context import TrialContext, TrialFailure
from nas.train.hparams import make_optimizer
from nas.train.supernet_io import SupernetInfo, check_fits, checked_bytes, load_weights, read_info

if TYPE_CHECKING:
    from nas.core.space import SearchSpace, Task
    from nas.core.weight_sharing import Supernet
    from nas.train.feed import DeviceFeed

_CACHE: dict[tuple[str, str, str], tuple[Supernet, tuple[int, ...] | None]] = {}  # (weights file, sha256, device)
# -> the supernet and the file's stat when last checked: one per worker
LOADS = {"count": 0}  # weights files read by this process (a test and the benchmark read it)


def norm_layers(model: torch.nn.Module) -> list[torch.nn.modules.batchnorm._BatchNorm]:
    return [m for m in model.modules()
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.track_running_stats]


def seeded_batches(feed: DeviceFeed, batch_size: int, seed: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Training batches (no augmentation) in an order fixed by ``seed``, epoch after epoch (the next seed each);
    the global random state is left as it was (an epoch's order is drawn when its first batch is)."""
    devices = [feed.device] if feed.device.type == "cuda" else []
    while True:
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            epoch = feed.train_batches(batch_size)
            first = next(epoch, None)
        if first is None:
            return
        yield first
        yield from epoch
        seed += 1


@torch.no_grad()
def recalibrate_bn(model: torch.nn.Module, feed: DeviceFeed, batches: int, batch_size: int, *, seed: int = 0,
                   autocast: Any = None) -> int:
    """Reset every batch-norm layer's running statistics and recompute them as the plain average over ``batches``
    training batches (fixed by ``seed``); the other layers stay in eval mode (no dropout). Batches used.

    >>> import numpy as np
    >>> from nas.train.feed import DeviceFeed
    >>> x = np.random.default_rng(0).normal(3.0, 1.0, size=(40, 4)).astype(np.float32)
    >>> feed = DeviceFeed(x, np.arange(40) % 2, x[:8], np.arange(8) % 2, torch.device("cpu"))
    >>> model = torch.nn.Sequential(torch.nn.BatchNorm1d(4), torch.nn.Dropout(0.5))
    >>> recalibrate_bn(model, feed, 2, 16), round(float(model[0].running_mean.mean()), 1), model.training
    (2, 3.0, False)
    """
    norms = norm_layers(model)
    if not norms or batches <= 0:
        return 0
    momenta = [m.momentum for m in norms]
    model.eval()
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the batches, each weighted alike
        m.train()
    used = 0
    try:
        for x, _ in seeded_batches(feed, batch_size, seed):
            if used == batches:
                break
            with autocast() if autocast is not None else contextlib.nullcontext():
                model(x)
            used += 1
    finally:
        for m, momentum in zip(norms, momenta):
            m.momentum = momentum
        model.eval()
    return used


def finetune(model: torch.nn.Module, ctx: TrialContext, steps: int, seed: int) -> float:
    """``steps`` optimizer steps of ``model`` on training batches fixed by ``seed`` (dropout's masks too, so an
    architecture fine-tunes alike in every trial); the mean loss."""
    opt = make_optimizer(model, ctx.hparams)
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=ctx.hparams["label_smoothing"])
    total = torch.zeros((), device=ctx.device)
    batches = seeded_batches(ctx.data, ctx.hparams["batch_size"], seed)
    device = torch.device(ctx.device)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        model.train()
        for _ in range(steps):
            x, y = next(batches)
            with ctx.autocast():
                loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.detach().float()
    model.eval()
    return float(total) / steps


def cached_supernet(info: SupernetInfo, space: SearchSpace, device: torch.device) -> tuple[Supernet, bool]:
    """The supernet of ``info`` on ``device``, read from disk on this process's first call only; and whether it
    came from the cache. Each call checks that the file is still the one read (its inode, size and times; its
    bytes hashed again where they changed), so a supernet retrained under a running search stops it at the next
    trial of any worker, not only where a worker restarted and read the new file
    (:class:`nas.core.types.SupernetChanged`)."""
    key = (str(info.path.resolve()), info.sha256, str(device))
    if key in _CACHE:
        net, seen = _CACHE[key]
        now = _stamp(info.path)
        if now != seen:
            checked_bytes(info)  # (rewritten with the same bytes: still the search's supernet)
            _CACHE[key] = net, now
        return net, True
    stamp = _stamp(info.path)  # (before the read: a change during it is seen at the next call)
    state = load_weights(info, device)
    with torch.device("meta"):
        net = space.supernet(info.task)
    net = net.to_empty(device=device)
    net.load_state_dict(state, strict=True)
    _CACHE.clear()  # one supernet per worker: a search uses one
    _CACHE[key] = net.eval(), stamp
    LOADS["count"] += 1
    return net, False


def _stamp(path: Path) -> tuple[int, ...] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


@dataclasses.dataclass(frozen=True)
class EvalOptions:
    bn_batches: int = 8
    bn_batch_size: int | None = None  # None: the trial's batch size
    finetune_steps: int = 0
    seed: int = 0


class SupernetEval:
    """A training function that evaluates each trial's architecture with the weights of the supernet trained in
    ``run_dir`` (see the module's docstring). ``space``: the search's space (default: the supernet's, where it is
    a registered one); it must be the space the supernet was trained for. ``bn_batches``: training batches the
    batch-norm statistics are recalibrated on (0: keep the supernet's); ``finetune_steps``: optimizer steps on
    the sub-network before that (0: none); ``seed``: fixes those batches."""

    def __init__(self, run_dir: str | os.PathLike[str], *, space: SearchSpace | None = None, bn_batches: int = 8,
                 bn_batch_size: int | None = None, finetune_steps: int = 0, seed: int = 0) -> None:
        for name, value, low in (("bn_batches", bn_batches, 0), ("finetune_steps", finetune_steps, 0),
                                 ("bn_batch_size", 1 if bn_batch_size is None else bn_batch_size, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        self.info = read_info(run_dir)
        self.run_dir = str(run_dir)
        if space is None:
            try:
                found = resolve_space_spec(self.info.space_spec["class"], allow_import=False)
            except ValueError as e:
                raise ValueError(f"{e}: pass the supernet's space as space=") from None
            space = found if not isinstance(found, type) else found(**self.info.space_spec.get("args", {}))
        self.space = space
        check_fits(self.info, space, self.info.task)
        self.options = EvalOptions(bn_batches, bn_batch_size, finetune_steps, seed)

    def check(self, space: SearchSpace, task: Task | None) -> None:
        """A one-line ValueError unless a search of ``space`` on data of ``task`` can use this supernet."""
        if task is None:
            raise ValueError(f"searching supernet {self.run_dir!r} needs data (the sub-networks are evaluated on "
                             "its validation split): pass data=")
        check_fits(self.info, space, task)

    def __call__(self, ctx: TrialContext) -> None:
        if ctx.model is None or ctx.data is None:
            raise TrialFailure(FailureKind.ERROR, "SupernetEval needs a worker with data and a built model")
        t0 = time.perf_counter()
        try:
            supernet, cached = cached_supernet(self.info, self.space, torch.device(ctx.device))
        except SupernetChanged as e:  # (the loop stops the search: no later trial can be scored alike)
            raise TrialFailure(FailureKind.SUPERNET_CHANGED, str(e)) from None
        except ValueError as e:
            raise TrialFailure(FailureKind.CHECKPOINT_MISSING, str(e)) from None
        opt, arch = self.options, ctx.trial.arch
        supernet.load_subnet(ctx.model, arch)
        # (nothing trained but the fine-tuning steps: the runner's figures of a training epoch would be false)
        metrics: dict[str, Any] = {"epochs_trained": 0, "train_seconds": 0.0, "samples_per_second": 0.0}
        if opt.finetune_steps:
            t1 = time.perf_counter()
            metrics["finetune_loss"] = finetune(ctx.model, ctx, opt.finetune_steps, opt.seed + 1)
            metrics["train_seconds"] = seconds = time.perf_counter() - t1
            metrics["samples_per_second"] = opt.finetune_steps * ctx.hparams["batch_size"] / max(seconds, 1e-9)
        recalibrate_bn(ctx.model, ctx.data, opt.bn_batches, opt.bn_batch_size or ctx.hparams["batch_size"],
                       seed=opt.seed, autocast=ctx.autocast)
        val_loss, val_acc = ctx.evaluate()
        ctx.report(epoch=1, val_acc=val_acc, val_loss=val_loss, eval_seconds=time.perf_counter() - t0,
                   supernet_cached=cached, supernet_epoch=self.info.epoch, **metrics)

    def __repr__(self) -> str:
        o = self.options
        return (f"SupernetEval({self.run_dir!r}, bn_batches={o.bn_batches}, finetune_steps={o.finetune_steps}, "
                f"seed={o.seed})")


def for_search(supernet: Any, space: SearchSpace, data: Any, train: Any = None) -> SupernetEval:
    """The training function of a search of ``space`` on ``data`` (a Dataset or None) with ``supernet`` (a run
    directory, or a :class:`SupernetEval`), checked to fit; one line for anything that does not."""
    if train is not None:
        raise ValueError("pass either supernet= (evaluate sub-networks with its weights) or train=, not both")
    if not space.has_supernet and data is not None:
        space.supernet(data.task)  # the space's own one-line refusal
    ev = supernet if isinstance(supernet, SupernetEval) else SupernetEval(supernet, space=space)
    ev.check(space, None if data is None else data.task)
    return ev


__all__ = ["SupernetEval", "cached_supernet", "finetune", "for_search", "recalibrate_bn"]
