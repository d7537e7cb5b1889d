"""``nas best RUN --evaluate-test``: the test-set accuracy of a run's best architecture, from its saved weights.

The space is rebuilt from run.json's spec with its constructor arguments (:func:`nas.core.spec.space_from_spec`:
like a resume, it imports the module a ``module:Class`` space names), the dataset loaded again from its spec and
the run's seed (the same splits), and the weights read through :func:`nas.run.store.best_weights` (best.json must
name the trial and the weights' hash agree) with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from nas.core.spec import space_from_spec
from nas.run.reader import load_run
from nas.run.store import best_weights
from nas.train.data import load_dataset
from nas.train.evaluate import evaluate_checkpoint


def evaluate_test(run_dir: str | os.PathLike[str], trial_id: int | None = None) -> dict[str, Any]:
    """:func:`nas.train.evaluate.evaluate_checkpoint` for trial ``trial_id`` (default: the run's best) of the run
    in ``run_dir``: ``test_loss``, ``test_acc``, ``test_images``, ``arch``, ``epoch``."""
    cfg, df = load_run(run_dir)
    if trial_id is None:
        done = df[df.state == "COMPLETE"]
        if done.empty:
            raise ValueError(f"run {str(run_dir)!r} has no completed trial")
        trial_id = int(done.loc[done.score.idxmax()].trial_id)
    if cfg.train.dataset is None:
        given = f"a Dataset object ({cfg.train.data_object!r})" if cfg.train.data_object else "no data"
        raise ValueError(f"run {str(run_dir)!r} was given {given}, not a dataset spec: call "
                         f"nas.train.evaluate.evaluate_checkpoint with the dataset in Python")
    weights = best_weights(Path(run_dir), trial_id).read_bytes()  # (hash-checked against best.json)
    data = load_dataset(cfg.train.dataset, seed=cfg.search.seed)
    settings = dataclasses.replace(cfg.train.settings, device="auto", threads=None)
    return evaluate_checkpoint(data, space_from_spec(cfg.search.space_spec()), weights, settings)


__all__ = ["evaluate_test"]
