"""Reading a run directory, without a lock and without running any code from it: ``run.json`` and the
journal are JSON; architectures are formatted by a space only when ``run.json`` names a registered
(built-in) space, otherwise shown as canonical JSON: a read never imports the module a run names.

>>> import tempfile
>>> load_run(tempfile.mkdtemp())
Traceback (most recent call last):
...
ValueError: '...' is not a run directory (no run.json)
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from nas.core.types import Arch, Result, Trial
from nas.run.config import RunConfig
from nas.run.journal import bulk_load, read_results
from nas.run.store import JOURNAL, read_config

if TYPE_CHECKING:
    from nas.core.space import SearchSpace

log = logging.getLogger(__name__)

COLUMNS = ["trial_id", "arch", "parent", "strategy", "state", "score", "epochs", "outcome", "failure", "scores",
           "member", "checkpoint_from", "hparams", "metrics", "error", "start_time", "end_time", "duration",
           "worker", "node", "history"]


def read_journal(run_dir: str | os.PathLike[str]) -> list[tuple[Trial, Result]]:
    """Every finished trial of a run directory, in the order they finished (see :mod:`nas.run.journal`)."""
    path = Path(run_dir)
    if not (path / JOURNAL).exists():
        read_config(path)  # raises the clearer error when this is no run directory at all
        return []
    with bulk_load():
        return list(read_results(path / JOURNAL))


def registered_space(cfg: RunConfig) -> SearchSpace | None:
    """The run's space when it is a registered space, else None (a custom space is never imported by a read)."""
    from nas.core.spec import space_from_spec

    try:
        return space_from_spec(cfg.search.space_spec(), allow_import=False)
    except Exception:  # (user code, or arguments of another version: canonical JSON instead)
        return None


def registered_formatter(cfg: RunConfig) -> Callable[[Arch], str] | None:
    """The one-line formatter of the run's space when it is a registered space, else None."""
    space = registered_space(cfg)
    return None if space is None else space.format


class UnfitArchitecture(ValueError):
    """The architecture of the ``index``-th record given to :func:`results_frame` (trial ``trial_id``) is not one of
    the run's registered space."""

    def __init__(self, index: int, trial_id: int, error: Exception) -> None:
        self.index, self.trial_id = index, trial_id
        super().__init__(f"trial {trial_id}'s architecture is not one of the run's space: {error}")


def arch_text(arch: Arch, format_arch: Callable[[Arch], str] | None) -> str:
    """An architecture as the tables show it: the registered space's one line, else canonical JSON (a ValueError
    where the space does not have it)."""
    return format_arch(arch) if format_arch else json.dumps(dict(arch), sort_keys=True)


def results_frame(records: Iterable[tuple[Trial, Result]], format_arch: Any = None) -> pd.DataFrame:
    """One row per trial, in finishing order. ``state`` is COMPLETE (scored) or FAILED; ``outcome`` how it ended
    (COMPLETE, STOPPED, PAUSED, FAILED); ``failure`` why it failed. ``arch`` is the space's one-line form when
    ``format_arch`` is given, else canonical JSON; ``metrics`` is the last epoch's metrics."""
    rows = []
    for k, (trial, result) in enumerate(records):
        try:
            arch = arch_text(trial.arch, format_arch)
        except ValueError as e:  # (a registered space's check: a decision it lacks, a value it does not offer)
            raise UnfitArchitecture(k, trial.trial_id, e) from None
        known = result.start_time is not None and result.end_time is not None  # a simulated clock starts at 0
        duration = result.end_time - result.start_time if known else None  # type: ignore[operator]
        rows.append({
            "trial_id": trial.trial_id, "arch": arch, "parent": trial.parent, "strategy": trial.strategy,
            "state": result.state.value, "outcome": result.outcome.value,
            "failure": None if result.failure is None else result.failure.value,
            "score": result.score, "epochs": result.epoch, "scores": result.scores,
            "member": trial.member, "checkpoint_from": trial.checkpoint_from,
            "hparams": dict(trial.hparams), "metrics": result.metrics, "error": result.error,
            "start_time": result.start_time, "end_time": result.end_time, "duration": duration,
            "worker": result.worker, "node": result.node, "history": list(result.history),
        })
    df = pd.DataFrame(rows, columns=COLUMNS)
    return df.astype({"parent": "Int64", "member": "Int64", "checkpoint_from": "Int64"})


#: the columns of :func:`results_frame` that :func:`summary_frame` makes
SUMMARY_COLUMNS = ["trial_id", "state", "outcome", "score", "metrics", "error", "start_time", "end_time", "duration"]


def summary_frame(records: Iterable[tuple[Trial, Result]]) -> pd.DataFrame:
    """:func:`results_frame`'s :data:`SUMMARY_COLUMNS` only (counts, the best, times, objectives: what a summary of
    the run needs), made column by column: no architecture formatted, nothing copied.

    >>> from nas.core.types import Outcome
    >>> df = summary_frame([(Trial(3, {"a": 1}), Result(3, Outcome.COMPLETE, 0.5, start_time=1.0, end_time=3.0))])
    >>> list(df.columns) == SUMMARY_COLUMNS, df[["state", "error"]].iloc[0].tolist(), float(df.duration[0])
    (True, ['COMPLETE', None], 2.0)
    """
    results = [r for _, r in records]
    columns: dict[str, list[Any]] = {
        "trial_id": [r.trial_id for r in results], "state": [r.state.value for r in results],
        "outcome": [r.outcome.value for r in results], "score": [r.score for r in results],
        "metrics": [r.metrics for r in results], "error": [r.error for r in results],
        "start_time": [r.start_time for r in results],
        "end_time": [r.end_time for r in results]}
    columns["duration"] = [None if a is None or b is None else b - a
                           for a, b in zip(columns["start_time"], columns["end_time"], strict=True)]
    return pd.DataFrame(columns, columns=SUMMARY_COLUMNS)


def load_run(run_dir: str | os.PathLike[str], *,
             before: Sequence[tuple[Trial, Result]] = ()) -> tuple[RunConfig, pd.DataFrame]:
    """A run directory's config (run.json, typed) and its trials, one row each in finishing order, after ``before``
    (e.g. the trials a warm start told its strategy: :func:`nas.run.warmstart.load_run_with_warm`)."""
    cfg, _, df = load_run_records(run_dir, before=before)
    return cfg, df


def load_run_records(run_dir: str | os.PathLike[str], *, before: Sequence[tuple[Trial, Result]] = ()
                     ) -> tuple[RunConfig, list[tuple[Trial, Result]], pd.DataFrame]:
    """:func:`load_run` with the records its rows come from (row ``i`` is record ``i``): a caller that needs a
    trial's own arch or hparams reads the journal once, not twice."""
    if not isinstance(run_dir, str | os.PathLike):  # (pathlib's "expected str, bytes or os.PathLike object")
        raise TypeError(f"a run directory is a path, got {run_dir!r} ({type(run_dir).__name__})")
    cfg = read_config(Path(run_dir))
    records = [*before, *read_journal(run_dir)]
    try:
        return cfg, records, results_frame(records, registered_formatter(cfg))
    except UnfitArchitecture as e:  # (where the reader finds it: the journal, or the run a warm start read)
        where = Path(run_dir) / JOURNAL if e.index >= len(before) else "a trial of the warm start's run"
        raise ValueError(f"{where}: {e}") from None
