"""Warm starts: a new search's strategy is told the finished trials of earlier runs before it asks anything,
without running them again (``nas search --warm-start RUN_DIR``).

Reading: only ``run.json`` and the journal, as JSON (:mod:`nas.run.reader`), and kept weights with
``torch.load(weights_only=True)``: nothing in a warm-start directory is imported or unpickled. A run qualifies
when it searched the same space (``run.json``'s ``space_spec``: class and constructor arguments) for the same
objectives (``run.json``'s ``objectives``, ``["val_acc:max"]`` for runs that name none), in the same order,
so that its scores mean what the new run's do; otherwise a one-line ValueError names the run and the mismatch.

Ids: a warm trial gets a NEGATIVE id, -1, -2, ... in the order the runs are given and, within a run, the
order its trials finished. A new run's own ids count up from 0 (:meth:`nas.core.strategy.Strategy.trial`), so the
two never collide, and loading the same directories again (a resume) gives the same ids. References inside a
run (``parent``, ``inherit_from``, ``checkpoint_from``) are mapped to the new ids, or None when they point at a
trial that is not carried over; ``member`` (PBT's) is dropped. Each result's metrics name where it came
from: ``warm_start_run`` (the directory) and ``warm_start_trial`` (its id there). Only COMPLETE trials with
a score are carried over (a failure says little about another search), those a scheduler stopped early included,
with the score of the epochs they trained. A run that trained on other data or for other epochs is warned of.

Strategies: :func:`tell_warm_start` hands each warm trial to the strategy's ``warm_start(trial, result)``
(evolution: the trials join the population in place of random initial members; random search: their
architectures are not proposed again; RL: REINFORCE on them, off-policy; Optuna: ``study.add_trial``). A
strategy without that method, or one whose method refuses (PBT: a finished trial is none of its members), is
refused with a ValueError naming it.

Weights: :func:`kept_checkpoint` returns the bytes of a warm trial's kept checkpoint (``checkpoints/<id>.pt``,
or ``best.pt`` when it is the run's best), so that a child of a warm trial can inherit its weights
(:mod:`nas.train.inherit`).

>>> import tempfile
>>> load_warm_start([tempfile.mkdtemp()], space_spec={"class": "toy", "args": {}}, objectives=["val_acc"])
Traceback (most recent call last):
...
ValueError: warm-start run '...': '...' is not a run directory (no run.json)
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from nas.core.objectives import Objective
from nas.core.strategy import Strategy
from nas.core.types import Result, Trial
from nas.run.config import RunConfig
from nas.run.layout import read_config
from nas.run.reader import load_run, read_journal
from nas.run.weights import kept_or_best

log = logging.getLogger(__name__)

DEFAULT_OBJECTIVES = ("val_acc:max",)


class WarmTrial(NamedTuple):
    """A finished trial of an earlier run, with its new (negative) id in ``trial`` and ``result``."""

    trial: Trial
    result: Result
    run: str  # the warm-start run directory it came from
    source_id: int  # its id in that run


def _space_of(spec: Mapping[str, Any]) -> Any:
    return json.loads(json.dumps(spec, sort_keys=True, default=str))


def _remap(ids: Mapping[int, int], ref: int | None) -> int | None:
    return None if ref is None else ids.get(ref)


def _objectives(specs: Sequence[str] | str) -> list[str]:
    return [str(Objective.parse(s)) for s in ([specs] if isinstance(specs, str) else specs)]


def load_warm_start(run_dirs: Sequence[str | os.PathLike[str]], *, space_spec: Mapping[str, Any],
                    objectives: Sequence[str] | str = DEFAULT_OBJECTIVES,
                    trained: RunConfig | None = None, counts: Sequence[int] = ()) -> list[WarmTrial]:
    """The COMPLETE trials of ``run_dirs`` (in that order), their ids made negative (see the module docstring).
    ``space_spec``: the new run's (``space.spec()``); ``objectives``: its objective specs; ``trained``: the new
    run's config, where a run trained on other data (its dataset's fingerprint) or for other epochs is warned of:
    its scores are taken as this run's would be (a transfer may be meant, so it is not refused); ``counts``: how many
    trials a run took from each when it began (run.json's ``warm_start_counts``), the first so many of each, as
    then (a source run that went on had its later trials told too, on resume and in the views, which the run's
    strategy never saw); a source that holds fewer now is warned of."""
    want_space, want_obj = _space_of(space_spec), _objectives(objectives)
    out: list[WarmTrial] = []
    seen: set[Path] = set()
    for run_dir in run_dirs:
        path = Path(run_dir)
        where = f"warm-start run {str(run_dir)!r}"
        if not path.is_dir():
            raise ValueError(f"{where} does not exist or is not a directory")
        if path.resolve() in seen:
            raise ValueError(f"{where} is given twice")
        seen.add(path.resolve())
        try:
            cfg = read_config(path)
            have_space = _space_of(cfg.search.space_spec())
            if have_space != want_space:
                raise ValueError(f"searched space {have_space}, this search {want_space}; a warm start needs the "
                                 "same space")
            have_obj = _objectives(cfg.search.objectives)
            if have_obj != want_obj:
                raise ValueError(f"optimised objectives {have_obj}, this search {want_obj}; a warm start needs the "
                                 "same objectives")
            records = read_journal(path)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        if trained is not None:
            _warn_of_other_training(where, cfg, trained)
        done = [(t, r) for t, r in records if r.ok and r.score is not None]
        if counts:
            had = counts[len(seen) - 1] if len(seen) <= len(counts) else 0
            if len(done) < had:
                log.warning("%s holds %d finished trials where this run took %d from it", where, len(done), had)
            done = done[:had]
        ids = {t.trial_id: -(len(out) + i + 1) for i, (t, _) in enumerate(done)}
        for trial, result in done:
            new_id = ids[trial.trial_id]
            t = dataclasses.replace(trial, trial_id=new_id, member=None, parent=_remap(ids, trial.parent),
                                    inherit_from=_remap(ids, trial.inherit_from),
                                    checkpoint_from=_remap(ids, trial.checkpoint_from))
            r = dataclasses.replace(result, trial_id=new_id, metrics={
                **result.metrics, "warm_start_run": str(run_dir), "warm_start_trial": trial.trial_id})
            out.append(WarmTrial(t, r, str(run_dir), trial.trial_id))
    return out


def _warn_of_other_training(where: str, theirs: RunConfig, ours: RunConfig) -> None:
    """A warning where the warm-start run trained otherwise (its data's fingerprint, its epochs): nothing said so,
    and its scores steered this search as if they were its own (0.99 on synthetic data above digits' 0.80)."""
    said = []
    a, b = theirs.train.dataset_fingerprint, ours.train.dataset_fingerprint
    if a is not None and b is not None and a != b:
        name, mine = theirs.train.dataset or theirs.train.data_object, ours.train.dataset or ours.train.data_object
        said.append(f"on other data ({name}, not {mine})" if name != mine else
                    f"on other data ({name} split by another seed, or changed since)")
    if theirs.train.settings.epochs != ours.train.settings.epochs:
        said.append(f"for {theirs.train.settings.epochs} epochs, not {ours.train.settings.epochs}")
    if said:
        log.warning("%s trained %s: its scores are told to the strategy as this search's would be", where,
                    " and ".join(said))


def warm_started(cfg: RunConfig) -> list[tuple[Trial, Result]]:
    """The trials a warm-started run's strategy was told first (negative ids; each result's metrics name its
    source run), read again from those runs; none where they are gone or changed (a warning says so)."""
    if not cfg.search.warm_start:
        return []
    try:
        warm = load_warm_start(cfg.search.warm_start, space_spec=cfg.search.space_spec(),
                               objectives=cfg.search.objectives, counts=cfg.search.warm_start_counts)
    except ValueError as e:
        log.warning("the warm-start trials are not shown: %s", e)
        return []
    return [(w.trial, w.result) for w in warm]


def load_run_with_warm(run_dir: str | os.PathLike[str]) -> tuple[RunConfig, Any]:
    """:func:`nas.run.reader.load_run` with the warm-start trials first (what ``nas results`` shows)."""
    return load_run(run_dir, before=warm_started(read_config(Path(run_dir))))


def tell_warm_start(strategy: Strategy, warm: Sequence[WarmTrial | tuple[Trial, Result]]) -> int:
    """Tell ``strategy`` (before its first ask) every warm trial through :meth:`Strategy.warm_start`; the number
    told. A strategy that cannot use them refuses with a ValueError naming it."""
    if not warm:
        return 0
    if strategy.asked != 0:
        raise ValueError(f"strategy {strategy.name!r} has already asked for trials: a warm start comes before its "
                         "first ask")
    for item in warm:
        strategy.warm_start(item[0], item[1])
    return len(warm)


def kept_checkpoint(run_dir: str | os.PathLike[str], trial_id: int) -> bytes | None:
    """The checkpoint a run kept for its trial ``trial_id`` (its id in that run): ``checkpoints/<id>.pt``, or
    ``best.pt`` when best.json names that trial (and the weights' hash agrees); None when it kept neither.
    A file that is not a plain checkpoint (``torch.load(weights_only=True)`` refuses it) is a ValueError."""
    return kept_or_best(Path(run_dir), int(trial_id))


def warm_checkpoint(warm: Mapping[int, WarmTrial], trial_id: int) -> bytes | None:
    """The kept checkpoint of the warm trial whose NEW id is ``trial_id`` (``warm``: ``{w.trial.trial_id: w}``),
    for a child that inherits from it; None when it is no warm trial or its run kept no weights for it."""
    w = warm.get(trial_id)
    return None if w is None else kept_checkpoint(w.run, w.source_id)
