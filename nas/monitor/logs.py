"""``--log tensorboard:DIR`` and ``--log mlflow:DIR``: a search's trials in TensorBoard or MLflow, as callbacks.

- TensorBoard (torch's :class:`torch.utils.tensorboard.SummaryWriter`): a run per trial, ``DIR/trial-<id>``, with
  every numeric metric per epoch as it is reported (so curves grow while the trial trains), and on its end the
  hparams plugin's record (its decisions and hyperparameters against its objectives, so TensorBoard's HPARAMS
  tab compares trials); ``DIR/search`` holds the search's best value of its first objective, in that metric's own
  units (``search/best_val_acc``; a minimised latency stays a latency), and utilization per finished trial.
- MLflow (a local store in ``DIR``: the SQLite database ``DIR/mlflow.db``, artifacts under ``DIR/artifacts``;
  MLflow's plain-file store is in maintenance mode and refused by default; through :class:`mlflow.MlflowClient`:
  no server, no global state): an
  experiment named after the run directory, a parent run for the search, a nested run per trial with its
  decisions and hyperparameters as params, its metrics per epoch (``step`` = epoch) and its end as the run's
  status (FINISHED, KILLED when a scheduler stopped it, FAILED); the parent run logs the best value of the first
  objective per finished trial (``best_val_acc``, in the metric's own units).

A log that fails (a full disk, a store it cannot write) says so in one warning and logs nothing more; the search goes
on, its run directory holding every trial (:class:`Guarded`).

>>> parse_log("tensorboard:/tmp/tb")
('tensorboard', '/tmp/tb')
>>> parse_log("wandb:x")
Traceback (most recent call last):
...
ValueError: --log 'wandb:x' must be tensorboard:DIR or mlflow:DIR
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nas.core.objectives import Objective
from nas.core.types import Outcome, Result, Trial
from nas.engine.interfaces import Callback, LoopStatus
from nas.engine.protocol import Event, EventKind
from nas.run.files import os_error_text

KINDS = ("tensorboard", "mlflow")
log = logging.getLogger(__name__)


def parse_log(spec: str) -> tuple[str, str]:
    """``KIND:DIR`` -> (kind, dir); a ValueError naming what is allowed."""
    kind, sep, where = str(spec).partition(":")
    if not sep or kind not in KINDS or not where:
        raise ValueError(f"--log {spec!r} must be tensorboard:DIR or mlflow:DIR")
    return kind, where


def _numbers(metrics: Mapping[str, Any]) -> dict[str, float]:
    return {str(k): float(v) for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v}


def _params(trial: Trial) -> dict[str, Any]:
    """A trial's decisions (``arch/<name>``) and hyperparameters (``hp/<name>``) as plain scalars."""
    out: dict[str, Any] = {}
    for prefix, values in (("arch", trial.arch), ("hp", trial.hparams)):
        for k, v in dict(values).items():
            out[f"{prefix}/{k}"] = v if isinstance(v, (int, float, str, bool)) else str(v)
    return out


def _quiet_writer_threads() -> None:
    """Keep TensorBoard's writer thread from printing its failure as a traceback: the thread keeps the exception
    and the writer raises it in the search's thread at the next write, where :class:`Guarded` says it in one line."""
    import threading

    previous = threading.excepthook
    if getattr(previous, "nas_quiet", False):
        return

    def hook(args: Any) -> None:
        if not (type(args.thread).__name__ == "_AsyncWriterThread" and getattr(args.thread, "exception", None)
                is args.exc_value):
            previous(args)

    hook.nas_quiet = True  # type: ignore[attr-defined]
    threading.excepthook = hook


class TensorBoardLog(Callback):
    """Writes the search for TensorBoard under ``log_dir`` (see the module's text)."""

    def __init__(self, log_dir: str | os.PathLike[str], objectives: Sequence[str] = ("val_acc:max",)) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter  # (needs the tensorboard package)
        except ImportError as e:
            raise ValueError(f"--log tensorboard:DIR needs the tensorboard package (pip install tensorboard): {e}") \
                from None
        self.dir = Path(log_dir)
        self._writer_cls = SummaryWriter
        _quiet_writer_threads()
        self.metrics = [o.split(":")[0] for o in objectives]
        self.first = Objective.parse(objectives[0])
        self._writers: dict[int, Any] = {}
        self._epoch: dict[int, int] = {}
        self._search: Any = None

    def _writer(self, trial_id: int) -> Any:
        if trial_id not in self._writers:
            self._writers[trial_id] = self._writer_cls(str(self.dir / f"trial-{trial_id}"))
        return self._writers[trial_id]

    def on_start(self, status: LoopStatus) -> None:
        self._search = self._writer_cls(str(self.dir / "search"))

    def on_event(self, status: LoopStatus, event: Event) -> None:
        if event.kind is EventKind.REPORT and event.report is not None:
            tid, report = event.trial.trial_id, event.report
            w = self._writer(tid)
            for k, v in _numbers(report.metrics).items():
                w.add_scalar(k, v, report.epoch)
            self._epoch[tid] = max(self._epoch.get(tid, 0), report.epoch)

    def on_result(self, status: LoopStatus, trial: Trial, result: Result) -> None:
        tid = trial.trial_id
        w = self._writer(tid)
        seen = self._epoch.pop(tid, 0)
        for i, entry in enumerate(result.history, 1):  # epochs no report carried (e.g. a simulated executor)
            epoch = int(entry.get("epoch", i))
            if epoch > seen:
                for k, v in _numbers({k: x for k, x in entry.items() if k != "epoch"}).items():
                    w.add_scalar(k, v, epoch)
        final = {f"objective/{m}": v for m, v in _numbers(result.metrics).items() if m in self.metrics}
        if result.outcome is not Outcome.FAILED and final:
            w.add_hparams(_params(trial), final, run_name=".")  # (into this trial's own run directory)
        w.close()
        del self._writers[tid]
        if self._search is not None and status.best_score is not None:
            best = self.first.score(status.best_score)  # (score() turns a minimised metric back)
            self._search.add_scalar(f"search/best_{self.first.metric}", best, status.finished)
            if status.utilization is not None:
                self._search.add_scalar("search/utilization", status.utilization, status.finished)

    def on_end(self, status: LoopStatus) -> None:
        for w in self._writers.values():
            w.close()
        self._writers.clear()
        if self._search is not None:
            self._search.close()

    def close(self) -> None:
        """Let go of every file (after a failure: each writer is closed, whatever it raises)."""
        for w in [*self._writers.values(), *[self._search] * (self._search is not None)]:
            with contextlib.suppress(Exception):
                w.close()
        self._writers.clear()
        self._search = None


class MLflowLog(Callback):
    """Records the search in a local MLflow file store at ``store_dir`` (see the module's text)."""

    STATUS = {Outcome.COMPLETE: "FINISHED", Outcome.FAILED: "FAILED"}

    def __init__(self, store_dir: str | os.PathLike[str], run_name: str,
                 objectives: Sequence[str] = ("val_acc:max",)) -> None:
        try:
            from mlflow import MlflowClient
        except ImportError as e:
            raise ValueError(f"--log mlflow:DIR needs the mlflow-skinny package (pip install mlflow-skinny): {e}") \
                from None
        root = Path(store_dir).resolve()
        root.mkdir(parents=True, exist_ok=True)
        self.uri = f"sqlite:///{root / 'mlflow.db'}"
        self.artifacts = (root / "artifacts").as_uri()
        self.client = MlflowClient(tracking_uri=self.uri)
        self.run_name = run_name
        self.objectives = list(objectives)
        self.first = Objective.parse(self.objectives[0])
        self.parent: str | None = None
        self.experiment: str | None = None
        self._runs: dict[int, str] = {}

    def on_start(self, status: LoopStatus) -> None:
        found = self.client.get_experiment_by_name(self.run_name)
        self.experiment = found.experiment_id if found else self.client.create_experiment(
            self.run_name, artifact_location=self.artifacts)
        parent = self.client.create_run(self.experiment, run_name="search",
                                        tags={"nas.strategy": status.strategy, "nas.workers": str(status.workers)})
        self.parent = parent.info.run_id
        self.client.log_param(self.parent, "objectives", ",".join(self.objectives))

    def _run(self, trial: Trial) -> str:
        if trial.trial_id not in self._runs:
            assert self.experiment is not None and self.parent is not None
            run = self.client.create_run(self.experiment, run_name=f"trial-{trial.trial_id}",
                                         tags={"mlflow.parentRunId": self.parent, "nas.trial": str(trial.trial_id)})
            rid = self._runs[trial.trial_id] = run.info.run_id
            for k, v in _params(trial).items():
                self.client.log_param(rid, k, v)
        return self._runs[trial.trial_id]

    def on_event(self, status: LoopStatus, event: Event) -> None:
        if event.kind is EventKind.REPORT and event.report is not None and self.parent is not None:
            rid = self._run(event.trial)
            for k, v in _numbers(event.report.metrics).items():
                self.client.log_metric(rid, k, v, step=event.report.epoch)

    def on_result(self, status: LoopStatus, trial: Trial, result: Result) -> None:
        if self.parent is None:
            return
        reported = trial.trial_id in self._runs
        rid = self._run(trial)
        if not reported:  # no report was heard (e.g. a simulated executor): its history at once
            for i, entry in enumerate(result.history, 1):
                for k, v in _numbers({k: x for k, x in entry.items() if k != "epoch"}).items():
                    self.client.log_metric(rid, k, v, step=int(entry.get("epoch", i)))
        if result.error:
            self.client.set_tag(rid, "nas.error", result.error[:4000])
        self.client.set_terminated(rid, self.STATUS.get(result.outcome, "KILLED"))
        del self._runs[trial.trial_id]
        if status.best_score is not None:
            best = self.first.score(status.best_score)  # (in the first objective's own units)
            self.client.log_metric(self.parent, f"best_{self.first.metric}", best, step=status.finished)

    def on_end(self, status: LoopStatus) -> None:
        if self.parent is None:
            return
        for rid in self._runs.values():
            self.client.set_terminated(rid, "KILLED")
        self._runs.clear()
        self.client.log_metric(self.parent, "finished", status.finished)
        if status.utilization is not None:
            self.client.log_metric(self.parent, "utilization", status.utilization)
        self.client.set_terminated(self.parent, "FINISHED" if status.state in ("finished", "stopped") else "KILLED")

    def close(self) -> None:
        """Close the database's pooled connections (best effort: the client has no public handle on its engine,
        reached by attribute where present; MLflow keeps the engine itself for the process's life)."""
        store = getattr(getattr(self.client, "_tracking_client", None), "store", None)
        with contextlib.suppress(Exception):
            store.engine.dispose()  # type: ignore[union-attr]


class Guarded(Callback):
    """``inner``, a log, whose first failure ends it: one warning naming ``spec`` and the reason, and no more calls.
    A log is a copy of what the run directory holds, so it never stops the search."""

    def __init__(self, spec: str, make: Callable[[], TensorBoardLog | MLflowLog]) -> None:
        self.spec = spec
        self.inner: TensorBoardLog | MLflowLog | None = None

        def start() -> None:
            self.inner = make()

        self._guard(start)

    def _guard(self, call: Callable[[], object]) -> None:
        try:
            call()
        except Exception as e:  # (OSError, sqlite's, SQLAlchemy's, TensorBoard's: a log's own failure)
            inner, self.inner = self.inner, None
            if inner is not None:
                inner.close()
            why = os_error_text(e) if isinstance(e, OSError) else (str(e).strip().splitlines() or [""])[0]
            log.warning("--log %s stopped logging: %s; the search goes on (its run directory holds every trial)",
                        self.spec, why or type(e).__name__)

    def _forward(self, hook: str, *args: Any) -> None:
        inner = self.inner
        if inner is not None:
            self._guard(lambda: getattr(inner, hook)(*args))

    def on_start(self, status: LoopStatus) -> None:
        self._forward("on_start", status)

    def on_event(self, status: LoopStatus, event: Event) -> None:
        self._forward("on_event", status, event)

    def on_result(self, status: LoopStatus, trial: Trial, result: Result) -> None:
        self._forward("on_result", status, trial, result)

    def on_end(self, status: LoopStatus) -> None:
        self._forward("on_end", status)


def log_callbacks(specs: Sequence[str], run_dir: str | os.PathLike[str],
                  objectives: Sequence[str] = ("val_acc:max",)) -> list[Callback]:
    """The callbacks of the run's ``--log`` entries, each :class:`Guarded`; a missing package is a ValueError."""
    out: list[Callback] = []
    for spec in specs:
        kind, where = parse_log(spec)
        check_installed(spec)
        if kind == "tensorboard":
            out.append(Guarded(spec, functools.partial(TensorBoardLog, where, objectives)))
        else:
            out.append(Guarded(spec, functools.partial(MLflowLog, where, Path(run_dir).name, objectives)))
    return out


def check_installed(spec: str) -> None:
    """A ValueError where the package ``--log KIND:DIR`` writes with is not installed (found without importing it:
    said before the search starts, not as a stopped log)."""
    import importlib.util

    kind, _ = parse_log(spec)
    module, package = {"tensorboard": ("tensorboard", "tensorboard"), "mlflow": ("mlflow", "mlflow-skinny")}[kind]
    if importlib.util.find_spec(module) is None:
        raise ValueError(f"--log {kind}:DIR needs the {package} package (pip install {package})")


__all__ = ["KINDS", "Guarded", "MLflowLog", "TensorBoardLog", "check_installed", "log_callbacks", "parse_log"]
