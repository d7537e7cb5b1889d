"""The framework's side of the one trial contract: what a worker does with a trial.

One :class:`TrialRunner` lives in each worker (a Ray actor, or the in-process executor) for its whole life,
with the run's data on the worker's device (:class:`nas.train.device.DeviceSide`) and the run's training
function ``train(ctx)`` (:mod:`nas.train.context`; the built-in one is :func:`nas.train.fit.fit`). For each
trial it checks the architecture, builds the candidate on the device, measures its costs, checks the
constraints BEFORE any training (a broken one is an INFEASIBLE failure that trained nothing), inherits a
parent's weights where asked, calls the training function with a context, and turns what happened into a
:class:`nas.core.types.Result`: any failure (an exception, a NaN, out of memory) is a FAILED result with its
typed reason, never a crash of the search.

A worker without data (``data=None``: a scoring function on a toy space, the driver benchmarks' no-op) runs
the training function with no model, data or device, and never imports torch.

>>> from nas.train.data import load_dataset
>>> from nas.search_spaces.macro import MacroSpace
>>> from nas.train.settings import TrainSettings
>>> arch = {"depth": 1, "width_0": 16, "width_1": 16, "width_2": 16, "kernel_0": 3, "kernel_1": 3,
...         "kernel_2": 3, "activation": "relu", "norm": "batch", "dropout": 0.0}
>>> runner = TrialRunner(load_dataset("digits"), TrainSettings(epochs=1, device="cpu", threads=1))
>>> result, checkpoint = runner.run(Trial(0, arch), MacroSpace(), None)
>>> result.outcome.value, result.metrics["device"], result.metrics["data_path"], len(result.history)
('COMPLETE', 'cpu', 'device', 1)
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nas.core.objectives import Objectives
from nas.core.types import Arch, FailureKind, InvalidSpace, Result, Trial
from nas.train.constraints import Constraints, parse_screen
from nas.train.context import CheckpointIO, ReportFn, TrialContext, TrialFailure
from nas.train.settings import TrainSettings

if TYPE_CHECKING:
    from nas.core.space import SearchSpace
    from nas.train.data import Dataset
    from nas.train.device import DeviceSide

log = logging.getLogger(__name__)

Keep = bool | Callable[[Result], bool]


def worker_identity() -> tuple[str, str]:
    return f"pid{os.getpid()}", socket.gethostname()


def failure_kind(e: BaseException) -> FailureKind:
    """The typed reason of a trial that raised ``e``."""
    if isinstance(e, TrialFailure):
        return e.kind
    if isinstance(e, InvalidSpace):
        return FailureKind.INVALID_SPACE
    torch = sys.modules.get("torch")
    if isinstance(e, MemoryError) or (torch is not None and isinstance(e, torch.OutOfMemoryError)):
        return FailureKind.OOM
    if isinstance(e, RuntimeError) and "DefaultCPUAllocator: can't allocate memory" in str(e):
        return FailureKind.OOM  # (torch's allocation failure on the CPU is a plain RuntimeError)
    if isinstance(e, FloatingPointError):
        return FailureKind.NAN
    return FailureKind.ERROR


def _missing_parent(trial: Trial, inherit: bytes | None) -> dict[str, Any]:
    """The metric of a child whose parent's weights were not there to inherit (it trained from scratch)."""
    return {"inherit_missing": trial.inherit_from} if trial.inherit_from is not None and inherit is None else {}


def seed_trial(seed: int) -> None:
    """Seed what a space's ``build`` or a training function may draw from: torch (where it is loaded; a trial with
    data seeds it again as it builds), numpy's global generator and Python's ``random`` (torch alone was seeded: a
    build that drew a width with ``random.choice`` made another model, with another score, for the same architecture
    and seed)."""
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002  (the global generator is the one such code draws from)
    if (torch := sys.modules.get("torch")) is not None:  # (a worker without data never loads torch for it)
        torch.manual_seed(seed)


def run_safely(trial: Trial, body: Callable[[], tuple[Result, bytes | None]], worker: str,
               node: str) -> tuple[Result, bytes | None]:
    """Run ``body``; any exception becomes a FAILED result with the error text and its typed reason
    (:func:`failure_kind`). Stamps times and worker."""
    start = time.time()
    try:
        result, ckpt = body()
    except (Exception, SystemExit, GeneratorExit) as e:  # a candidate's failure is data, not a crash (its sys.exit()
        # too); KeyboardInterrupt and the other BaseExceptions are orders to stop the whole process, as Python means
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(e, torch.OutOfMemoryError) and torch.cuda.is_available():
            torch.cuda.empty_cache()
        kind = failure_kind(e)
        if isinstance(e, TrialFailure):  # an expected failure: its one line says it all
            result = Result.failed(trial.trial_id, f"{kind.value}: {e}", kind, metrics=e.metrics)
        else:
            result = Result.failed(trial.trial_id, f"{error_text(e)}\n{_traceback(e)}", kind)
        ckpt = None
    result.start_time, result.end_time = start, time.time()
    result.worker, result.node = worker, node
    return result, ckpt


def error_text(e: BaseException) -> str:
    """``Type: message`` of ``e``, where even its ``__str__`` raises (a candidate's own exception class)."""
    try:
        return f"{type(e).__name__}: {e}"
    except Exception as inner:  # noqa: BLE001 - the text of a failure must not fail the search
        return f"{type(e).__name__} (its message could not be made: {type(inner).__name__})"


def _traceback(e: BaseException) -> str:
    try:
        return traceback.format_exc(limit=-3)
    except Exception:  # noqa: BLE001 - (format_exc calls str(e) too)
        return "".join(traceback.format_tb(e.__traceback__, limit=-3))


class TrialRunner:
    """Runs trials with ``train`` (default :func:`nas.train.fit.fit`) on ``data`` (None: no model, data or
    device). ``worker`` names it in results (default ``pid<N>``)."""

    def __init__(self, data: Dataset | None, settings: TrainSettings | None = None, *,
                 train: Callable[[TrialContext], Any] | None = None, worker: str | None = None) -> None:
        self.settings = settings or TrainSettings()
        if train is None:
            from nas.train.fit import fit

            train = fit
        if self.settings.proxy_screen is not None:  # the proxy constraint: scored first, on this worker
            from nas.train.proxies import screened

            name, minimum = parse_screen(self.settings.proxy_screen)
            train = screened(train, name, minimum=minimum)
        self.train = train
        self.objectives = Objectives(list(self.settings.objectives))
        self.constraints = Constraints(max_flops=self.settings.max_flops,
                                       max_latency_ms=self.settings.max_latency_ms)
        self.worker, self.node = worker_identity()
        if worker:
            self.worker = worker
        self.side: DeviceSide | None = None
        if data is not None:
            from nas.train.device import DeviceSide

            self.side = DeviceSide(data, self.settings)

    def run(self, trial: Trial, space: SearchSpace | None, checkpoint: bytes | None, *, report: ReportFn | None = None,
            inherit: bytes | None = None, keep: Keep = True) -> tuple[Result, bytes | None]:
        """Train ``trial`` (from ``checkpoint`` if given; inheriting tensors from the ``inherit`` checkpoint if
        given) with the training function, sending each epoch's report to ``report``. Its checkpoint comes back
        where ``keep`` says (a bool, or a test of the Result) or the trial paused; else None."""
        def body() -> tuple[Result, bytes | None]:
            seed_trial(self.settings.seed * 1_000_003 + trial.trial_id)
            if space is not None:
                space.validate(trial.arch)
            if self.side is None or space is None:
                return self._run_bare(trial, checkpoint, report, inherit, keep)
            with self.side.flags():
                return self._run(self.side, trial, space, checkpoint, report, inherit, keep)

        return run_safely(trial, body, self.worker, self.node)

    def _run_bare(self, trial: Trial, checkpoint: bytes | None, report: ReportFn | None, inherit: bytes | None,
                  keep: Keep) -> tuple[Result, bytes | None]:
        """No model: the function gets the state it continues from and its parent's state as a trial with data
        does (without them a promotion or a PBT segment started again from epoch 0)."""
        ctx = self._context(trial, model=None, data=None, hparams=self.settings.for_trial(trial), device="cpu",
                            checkpoint=CheckpointIO(checkpoint, "cpu"), report=report)
        measured = _missing_parent(trial, inherit)
        if inherit is not None:  # no tensors to copy: the parent's whole state is the function's to use
            ctx.inherited = CheckpointIO(inherit, "cpu").load()
            if trial.inherit_from is not None:
                measured["inherited_from"] = trial.inherit_from
        returned = self._train(ctx)
        return self._outcome(ctx, returned, measured, keep)

    def _run(self, side: DeviceSide, trial: Trial, space: SearchSpace, checkpoint: bytes | None,
             report: ReportFn | None, inherit: bytes | None, keep: Keep) -> tuple[Result, bytes | None]:
        import torch

        from nas.train.hparams import check_augmentation
        from nas.train.inherit import inherit_into

        hp = self.settings.for_trial(trial)
        check_augmentation(hp, side.task.input_shape)
        model, costs = self._prepare(side, trial, space, hp)
        measured = _missing_parent(trial, inherit)
        inherited = None
        if inherit is not None:
            found, inherited = inherit_into(model, inherit, side.device, trial.inherit_from)
            measured.update(found)
        ckpt_io = CheckpointIO(checkpoint, side.device)
        if (norm := side.normalization()) is not None:
            ckpt_io.extra["normalization"] = norm
        ctx = self._context(trial, model=model, data=side.feed, task=side.task, hparams=hp, device=side.device,
                            costs=costs, checkpoint=ckpt_io, report=report, evaluate=side.evaluate,
                            autocast=side.autocast)
        ctx.inherited = inherited
        t0 = time.perf_counter()
        returned = self._train(ctx)
        train_seconds = time.perf_counter() - t0
        epochs = len(ctx.history)
        samples = ctx.data.train_samples(hp["batch_size"]) * ctx.world_size * epochs  # (every rank's, on a gang)
        measured.update({
            "train_seconds": train_seconds, "epochs_trained": epochs,
            "samples_per_second": samples / max(train_seconds, 1e-9),
            "device": side.device.type, "threads": torch.get_num_threads(), "hparams": hp,
            "data_path": "streaming" if side.feed.streaming else "device"})
        return self._outcome(ctx, returned, measured, keep)


    # -- the steps a data-parallel gang's runner (nas.train.gang.GangRunner) does its own way -----------
    def _prepare(self, side: DeviceSide, trial: Trial, space: SearchSpace, hp: dict[str, Any]
                 ) -> tuple[Any, dict[str, Any]]:
        """The candidate built on the device and its measured costs; a broken constraint is INFEASIBLE."""
        model, n_params = self._build(side, trial, space)
        return model, self._measure(side, model, n_params, hp, trial.arch)

    def _build(self, side: DeviceSide, trial: Trial, space: SearchSpace) -> tuple[Any, int]:
        import torch

        s = self.settings
        torch.manual_seed(s.seed * 1_000_003 + trial.trial_id)
        model, n_params = side.build(trial.arch, space)
        if n_params > s.max_params:  # before anything else is measured: it may not even fit a forward pass
            raise TrialFailure(FailureKind.INFEASIBLE, f"params {n_params:,} > max_params {s.max_params:,}",
                               {"params": n_params})
        return model, n_params

    def _measure(self, side: DeviceSide, model: Any, n_params: int, hp: dict[str, Any], arch: Arch | None = None
                 ) -> dict[str, Any]:
        costs = side.measure(model, n_params, hp["batch_size"], arch)
        violation = self.constraints.check(costs) if self.constraints.active else None
        if violation is not None:  # recorded at once; nothing is trained
            raise TrialFailure(FailureKind.INFEASIBLE, str(violation), costs)
        return costs

    def _context(self, trial: Trial, **parts: Any) -> TrialContext:
        s = self.settings
        return TrialContext(trial, objectives=self.objectives, default_epochs=s.epochs, total_epochs=s.epochs, **parts)

    def _train(self, ctx: TrialContext) -> Any:
        return self.train(ctx)

    def _outcome(self, ctx: TrialContext, returned: Any, measured: dict[str, Any], keep: Keep
                 ) -> tuple[Result, bytes | None]:
        return ctx.outcome(returned, measured=measured, keep_checkpoint=keep)


__all__ = ["TrialRunner", "error_text", "failure_kind", "run_safely", "seed_trial", "worker_identity"]
