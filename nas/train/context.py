"""The trial contract: what a training function sees (:class:`TrialContext`) and what becomes of it.

The framework owns the trial: it builds the candidate, measures its costs, checks the constraints
before any training (a broken one is an INFEASIBLE failure that trained nothing), then calls a training
function with a context. The function trains, calls ``ctx.report(epoch=..., **metrics)`` after each
epoch (True back means the scheduler said stop: return now), and may save and load checkpoints through
``ctx.checkpoint``. The built-in :func:`nas.train.fit.fit` is such a function; so is a user's own, in the
style of Ray Tune's and Optuna's:

>>> def train(ctx):
...     for epoch in range(1, ctx.epochs + 1):
...         if ctx.report(epoch=epoch, val_acc=0.2 * epoch, loss=1.0 / epoch):
...             break
>>> from nas.core.types import Trial
>>> ctx = TrialContext(Trial(0, {"x": 1}, epochs=3), model=None, data=None, hparams={}, device="cpu")
>>> train(ctx)
>>> result, checkpoint = ctx.outcome()
>>> result.state.value, result.score, result.epoch, [h["epoch"] for h in result.history]
('COMPLETE', 0.6000000000000001, 3, [1, 2, 3])

On a data-parallel gang (``trial_workers=N``: :mod:`nas.train.gang`) the same function runs on every rank:
``ctx.rank`` and ``ctx.world_size`` say which, ``ctx.data`` is this rank's shard of each epoch, and
``ctx.wrap(model)`` returns the model wrapped in torch's ``DistributedDataParallel`` (the module itself on one
rank, so a function that trains ``ctx.wrap(ctx.model)`` runs anywhere), as Ray Train's ``prepare_model`` and
Lightning Fabric's ``setup`` do; train the wrapper, save and load ``ctx.model``. Only rank 0's reports reach the
driver; every rank's ``ctx.report`` returns the scheduler's answer at the same epoch.

>>> ctx.rank, ctx.world_size, ctx.wrap(ctx.model) is ctx.model
(0, 1, True)

``ctx.report`` sends each report on (to the driver, where a scheduler decides) as it happens. The
final result is the last report's metrics (plus what the framework measured: costs, training seconds);
its scores are the run's objectives applied to them (:class:`nas.core.objectives.Objectives`, the one
place a mode is applied), so a run whose objective was never reported fails with one line naming the
metric and the metrics it did see (OBJECTIVE_MISSING).
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import io
import logging
import math
import numbers
import reprlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from nas.core.objectives import Objectives
from nas.core.types import Decision, FailureKind, Outcome, Result, Trial, python_numbers, within_int64

if TYPE_CHECKING:
    import torch

    from nas.core.space import Task

ReportFn = Callable[[int, Mapping[str, Any], float | None], Decision]  # (epoch, metrics, score) -> decision


class TrialFailure(Exception):
    """A trial ends FAILED with ``kind`` (a :class:`nas.core.types.FailureKind`) and this message."""

    def __init__(self, kind: FailureKind, message: str, metrics: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.metrics = dict(metrics or {})


class CheckpointIO:
    """``ctx.checkpoint``: :meth:`load` the state this trial starts from (a paused trial's, PBT's exploited
    member's), :meth:`save` a state (a dict of tensors, numbers, strings, lists, dicts) for later trials.

    Checkpoints are made only where someone uses them (a promotion, PBT, weight inheritance, the best
    trial's weights): :meth:`provide` registers how to make one, and the framework calls it only then. A
    function that neither saves nor provides gets its model's weights and last epoch kept."""

    def __init__(self, source: bytes | None = None, device: str | torch.device = "cpu") -> None:
        self.source = source
        self.device = device
        self._saved: bytes | None = None
        self._provider: Callable[[], Mapping[str, Any]] | None = None
        self.extra: dict[str, Any] = {}  # what the worker adds to every state saved (e.g. the input normalisation)

    def load(self) -> dict[str, Any] | None:
        """The state this trial starts from, or None (``torch.load(weights_only=True)``: no code runs)."""
        if self.source is None:
            return None
        import torch

        state: dict[str, Any] = torch.load(io.BytesIO(self.source), map_location=self.device, weights_only=True)
        return state

    def save(self, state: Mapping[str, Any]) -> None:
        """Keep ``state`` (a mapping of tensors, numbers, strings, None, and lists and dicts of them: what a later
        ``torch.load(weights_only=True)`` takes back without running code) as this trial's checkpoint; anything
        else is a TypeError naming its key, here, not a failure of the trial that would load it."""
        import torch

        _check_state(state)
        buf = io.BytesIO()
        torch.save({**self.extra, **dict(state)}, buf)
        self._saved = buf.getvalue()

    def provide(self, make_state: Callable[[], Mapping[str, Any]]) -> None:
        """Register how to make this trial's checkpoint, made only if it will be used."""
        self._provider = make_state

    def make(self) -> bytes | None:
        if self._saved is None and self._provider is not None:
            self.save(self._provider())
        return self._saved


def _check_state(state: Any) -> None:
    """A TypeError naming the first value of ``state`` a weights-only load refuses (see :meth:`CheckpointIO.save`).

    >>> _check_state({"epoch": 3, "opt": {"state": {0: [1.0, None]}}, "name": "x"})
    >>> _check_state([3])
    Traceback (most recent call last):
    ...
    TypeError: ctx.checkpoint.save takes a mapping of names to tensors, numbers, strings, lists and dicts; got list [3]
    >>> _check_state({"epoch": 3, "thing": collections.defaultdict(list)})
    Traceback (most recent call last):
    ...
    TypeError: ctx.checkpoint.save: state['thing'] is a defaultdict (defaultdict(<class 'list'>, {})), which a ...
    """
    import torch

    if not isinstance(state, Mapping):
        raise TypeError(f"ctx.checkpoint.save takes a mapping of names to tensors, numbers, strings, lists and dicts; "
                        f"got {type(state).__name__} {state!r:.80}")
    # (exact types: a weights-only load refuses numpy's float64, a defaultdict, a namedtuple, a dict subclass)
    plain = (str, bytes, bytearray, int, float, complex, bool, type(None), torch.dtype, torch.device, torch.Size,
             torch.layout)
    todo: list[tuple[str, Any]] = [(f"[{k!r}]", v) for k, v in state.items()]
    while todo:
        where, value = todo.pop()
        if type(value) in plain or isinstance(value, torch.Tensor):
            continue
        if type(value) in (dict, collections.OrderedDict):
            todo += [(f"{where}[{k!r}]", v) for k, v in value.items()]
        elif type(value) in (list, tuple, set):
            todo += [(f"{where}[{i}]", v) for i, v in enumerate(value)]
        else:
            raise TypeError(f"ctx.checkpoint.save: state{where} is a {type(value).__name__} ({value!r:.60}), which a "
                            "checkpoint cannot hold (it is loaded back with torch.load(weights_only=True), which runs "
                            "no code): keep tensors, numbers, strings, None, and lists and dicts of them")


class TrialContext:
    """What a training function sees: ``trial``, ``model`` (built, on ``device``), ``data`` (the worker's
    dataset feed: ``train_batches(batch_size, augment)``, ``val_batches``), ``hparams`` (the trial's
    resolved hyperparameters), ``device``, ``epochs`` (to train in this run), ``total_epochs`` (the run's
    full length, which a learning-rate schedule spans even where a scheduler stops the trial early),
    ``task`` (the :class:`nas.core.space.Task` the model was built for: input shape, class count; None
    without data), ``costs`` (measured before training), ``checkpoint`` (:class:`CheckpointIO`),
    ``report(epoch=..., **metrics) -> bool``, and ``evaluate()`` (validation loss and accuracy of
    ``model``) where the worker provides it. ``rank``, ``world_size`` and :meth:`wrap`: the data-parallel gang
    this trial runs on (rank 0 of 1 elsewhere)."""

    def __init__(self, trial: Trial, *, model: Any, data: Any, hparams: Mapping[str, Any],
                 device: str | torch.device, costs: Mapping[str, Any] | None = None,
                 checkpoint: CheckpointIO | None = None, report: ReportFn | None = None,
                 objectives: Objectives | None = None, default_epochs: int = 1, total_epochs: int | None = None,
                 evaluate: Callable[[Any], tuple[float, float]] | None = None,
                 autocast: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
                 rank: int = 0, world_size: int = 1, wrap: Callable[..., Any] | None = None,
                 task: Task | None = None) -> None:
        self.trial = trial
        self.task = task
        self.rank, self.world_size = rank, world_size
        self.model = model
        self.data = data
        self.hparams = dict(hparams)
        self.device = device  # a torch.device on a worker with data; "cpu" for a function that trains no model
        self.costs = dict(costs or {})
        self.checkpoint = checkpoint or CheckpointIO(None, self.device)
        self.epochs = trial.epochs or default_epochs
        self.total_epochs = total_epochs or self.epochs  # the run's full training length (schedules span it)
        self.objectives = objectives or Objectives()
        self.history: list[dict[str, Any]] = []
        self.decision = Decision.CONTINUE
        self.inherited: dict[str, Any] | None = None  # the parent's state where the model inherited from one
        self._report = report
        self._evaluate = evaluate
        self._autocast = autocast
        self._wrap = wrap

    def report(self, epoch: int | None = None, **metrics: Any) -> bool:
        """Record one epoch's metrics and send them on; True when the trial should stop now (the scheduler
        said STOP or PAUSE). ``epoch``: epochs trained in all, from 1 (default: the last one + 1)."""
        last = self.history[-1]["epoch"] if self.history else 0
        epoch = last + 1 if epoch is None else _whole_epoch(epoch, "report epoch")
        if epoch <= last:
            raise ValueError(f"report epochs must increase: got epoch {epoch} after {last}" if last else
                             f"report epochs count the epochs trained, from 1: got epoch {epoch}")
        metrics = {k: _journal_value(v, k) for k, v in metrics.items()}
        bad = [k for k, v in metrics.items() if isinstance(v, float) and not math.isfinite(v)]
        if bad:
            raise TrialFailure(FailureKind.NAN, f"metric {bad[0]} became {metrics[bad[0]]} in epoch {epoch}",
                               {"epoch": epoch, **metrics})
        self.history.append({"epoch": epoch, **metrics})
        if self.decision is not Decision.CONTINUE:
            return True
        if self._report is not None:
            self.decision = self._report(epoch, metrics, self._score(metrics))
        return self.decision is not Decision.CONTINUE

    @property
    def should_stop(self) -> bool:
        return self.decision is not Decision.CONTINUE

    def evaluate(self, model: Any = None) -> tuple[float, float]:
        """Validation loss and accuracy of ``model`` (default: ``ctx.model``) on the worker's device."""
        if self._evaluate is None:
            raise RuntimeError("this worker has no evaluate(): compute the validation metrics yourself")
        return self._evaluate(self.model if model is None else model)

    def wrap(self, model: Any = None, **options: Any) -> Any:
        """``model`` (default ``ctx.model``) ready to train data-parallel: on a gang of several ranks wrapped in
        ``DistributedDataParallel`` (its gradients averaged over the ranks in ``backward``; ``options`` go to it,
        e.g. ``find_unused_parameters=True``), elsewhere the model itself. Wrap once, after loading a checkpoint."""
        model = self.model if model is None else model
        return self._wrap(model, **options) if self._wrap is not None else model

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The worker's mixed-precision context (bf16 autocast where the device supports it)."""
        return self._autocast() if self._autocast is not None else contextlib.nullcontext()

    def _score(self, metrics: Mapping[str, Any]) -> float | None:
        with contextlib.suppress(ValueError):
            return self.objectives.scores({**self.costs, **metrics})[0]
        return None

    # -- the framework's side -------------------------------------------------------------------
    def outcome(self, returned: Any = None, *, measured: Mapping[str, Any] | None = None,
                keep_checkpoint: bool | Callable[[Result], bool] = False) -> tuple[Result, bytes | None]:
        """The trial's Result once its function returned ``returned`` (a mapping of final metrics may
        stand in for a last report): scores from the objectives, the reason it ended, and its checkpoint
        when ``keep_checkpoint`` (or a paused trial's, always)."""
        final: dict[str, Any] = dict(self.history[-1]) if self.history else {}
        if isinstance(returned, Mapping):
            final.update(_returned_metrics(returned))
        if not final:
            wanted = ", ".join(self.objectives.metrics)
            raise TrialFailure(FailureKind.OBJECTIVE_MISSING, _nothing_to_score(returned, wanted), dict(measured or {}))
        metrics = {**self.costs, **dict(measured or {}), **final}
        try:
            scores = self.objectives.scores(metrics)  # a measured cost (params, latency_ms, ...) may be one
        except ValueError as e:
            raise TrialFailure(FailureKind.OBJECTIVE_MISSING, str(e), metrics) from None
        if not all(math.isfinite(s) for s in scores):
            raise TrialFailure(FailureKind.NAN, f"objective values {list(scores)} are not finite", metrics)
        outcome = {Decision.STOP: Outcome.STOPPED, Decision.PAUSE: Outcome.PAUSED}.get(self.decision,
                                                                                      Outcome.COMPLETE)
        epoch = int(final.get("epoch", self.history[-1]["epoch"] if self.history else self.epochs))
        result = Result(self.trial.trial_id, outcome, score=scores[0], scores=list(scores),
                        metrics=metrics, history=list(self.history), epoch=epoch)
        keep = keep_checkpoint(result) if callable(keep_checkpoint) else keep_checkpoint
        if keep or outcome is Outcome.PAUSED:
            if self.checkpoint._provider is None and self.checkpoint._saved is None and self.model is not None:
                model = self.model
                self.checkpoint.provide(lambda: {"model": {k: v.detach().cpu() for k, v in
                                                           model.state_dict().items()}, "epoch": epoch})
            return result, self.checkpoint.make()
        return result, None


def _nothing_to_score(returned: Any, wanted: str) -> str:
    """Why a trial that never reported has nothing to score, saying what its function returned where that was
    neither None nor a mapping of metrics (a number, as an Optuna objective returns; a generator, whose body never
    ran)."""
    why = f"the training function never called ctx.report(...) (objective {wanted}); nothing to score"
    if returned is None:
        return why
    if inspect.isgenerator(returned):
        return f"{why}: it returned a generator (a function with yield), whose body never ran"
    shown = reprlib.repr(returned)
    return (f"{why}: it returned {shown} ({type(returned).__name__}); return a mapping of metrics such as "
            f"{{{wanted.split(', ')[0]!r}: ...}} or report them")


#: how deep a metric's lists and mappings may nest (the journal's JSON writer stops at 255 levels)
MAX_NESTING = 32
log = logging.getLogger(__name__)


def _whole_epoch(epoch: Any, what: str) -> int:
    """``epoch`` as an int where it is a whole number the journal holds; else a ValueError naming ``what``.
    (int() took 1.5 as 1 and "1" as 1; 10**30 crashed the driver's journal: "exceeds 64-bit range")."""
    if isinstance(epoch, bool) or not isinstance(epoch, numbers.Integral) or not within_int64(int(epoch)):
        raise ValueError(f"{what} must be a whole number (an int below 2**63), got {reprlib.repr(epoch)}")
    return int(epoch)


def _returned_metrics(returned: Mapping[Any, Any]) -> dict[str, Any]:
    """The final metrics a training function returned, as the journal holds them (an ``epoch`` among them checked
    as a report's is)."""
    bad = next((k for k in returned if not isinstance(k, str)), None)
    if bad is not None:
        raise ValueError(f"the training function returned a metric named {reprlib.repr(bad)} "
                         f"({type(bad).__name__}): metric names are strings")
    return {k: _whole_epoch(python_numbers(v), "the returned metric epoch") if k == "epoch" else _journal_value(v, k)
            for k, v in returned.items()}


def _journal_value(value: Any, name: str, depth: int = 0) -> Any:
    """A metric as the journal holds it: numbers numpy or torch holds as Python's (:func:`python_numbers`); an
    integer too large for the journal's 64-bit integers as a float (what a JSON reader would make of it; beyond a
    float's range, infinite: a NAN failure at the top level), in lists and mappings too (a tuple as a list, a
    mapping's keys as strings), a non-finite number inside them as None (JSON's null); any other value (a model, a
    set, bytes) as its text, as the journal writes it, said once per metric and type (the results a search returns
    held the live object, kept every trial's model alive, and differed from the same run read back). A ValueError
    naming the metric where it nests deeper than :data:`MAX_NESTING` (each of these crashed the driver's journal
    writer, and with it the search).

    >>> _journal_value({"a": (1, float("nan")), 2: b"x"}, "m")
    {'a': [1, None], '2': "b'x'"}
    """
    if isinstance(value, Mapping) or type(value) in (list, tuple):
        if depth == MAX_NESTING:
            raise ValueError(f"metric {name!r} nests lists or mappings deeper than {MAX_NESTING} levels")
        if isinstance(value, Mapping):
            return {str(k): _journal_value(v, name, depth + 1) for k, v in value.items()}
        return [_journal_value(v, name, depth + 1) for v in value]
    value = python_numbers(value)
    if isinstance(value, int) and not isinstance(value, bool) and not within_int64(value):
        try:
            value = float(value)
        except OverflowError:
            value = math.inf if value > 0 else -math.inf
    if isinstance(value, bool):  # (subclasses, enums among them, as the journal writes them: their plain values)
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return None if depth and not math.isfinite(value) else float(value)
    if value is None or isinstance(value, str):
        return None if value is None else str(value)
    if (name, type(value).__name__) not in _TEXT_SAID:
        _TEXT_SAID.add((name, type(value).__name__))
        log.warning("metric %r is a %s, which the journal keeps as its text (str()); report numbers, strings, "
                    "lists or mappings of them", name, type(value).__name__)
    return str(value)


_TEXT_SAID: set[tuple[str, str]] = set()  # (metric, type) said once per process


__all__ = ["CheckpointIO", "ReportFn", "TrialContext", "TrialFailure"]
