"""The test-set accuracy of a run's chosen architecture: its saved weights (``best.pt``) on the dataset's test
split, which no search ever reads (``nas best RUN --evaluate-test``).

The dataset is loaded again from the run's ``run.json`` (its spec and seed give the same splits), the inputs
normalised with the training split's statistics as in training, and the weights read with
``torch.load(weights_only=True)`` (data, never code).
"""

from __future__ import annotations

import dataclasses
import io
import os
from pathlib import Path
from typing import Any

import torch

from nas.train.data import Dataset, load_dataset


def evaluate_checkpoint(data: Dataset, space: Any, checkpoint: bytes, settings: Any) -> dict[str, Any]:
    """Loss and accuracy on ``data``'s test split of the model saved in ``checkpoint`` (a trial's checkpoint)."""
    from nas.train.device import DeviceSide

    if data.x_test is None or data.y_test is None:
        raise ValueError(f"dataset {data.name!r} has no test split (cifar10:DIR and cifar100:DIR have one; so "
                         f"does a .npz file with arrays x_test and y_test)")
    state = torch.load(io.BytesIO(checkpoint), map_location="cpu", weights_only=True)
    test_view = Dataset(data.name, data.x_train, data.y_train, data.x_test, data.y_test)
    side = DeviceSide(test_view, settings)  # normalises with the training split's statistics
    model, _ = side.build(state["arch"], space)
    model.load_state_dict(state["model"])
    loss, acc = side.evaluate(model)
    return {"test_loss": loss, "test_acc": acc, "test_images": len(data.x_test), "arch": state["arch"],
            "epoch": int(state["epoch"])}


def evaluate_test(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """:func:`evaluate_checkpoint` for the best trial of the run in ``run_dir``."""
    from nas.api import resolve_space
    from nas.run.store import read_config
    from nas.train.settings import TrainSettings

    cfg = read_config(Path(run_dir))
    weights = Path(run_dir) / "best.pt"
    if not weights.is_file():
        raise ValueError(f"run {str(run_dir)!r} saved no weights (best.pt is missing): nothing to evaluate")
    if not cfg.get("data"):
        raise ValueError(f"run {str(run_dir)!r} was given a Dataset object, not a dataset spec: call "
                         f"nas.train.evaluate.evaluate_checkpoint with that dataset in Python")
    data = load_dataset(cfg["data"], seed=int(cfg.get("seed", 0)))
    names = {f.name for f in dataclasses.fields(TrainSettings)}
    saved = {k: v for k, v in cfg.get("settings", {}).items() if k in names}
    settings = TrainSettings(**{**saved, "device": "auto", "threads": None})
    return evaluate_checkpoint(data, resolve_space(cfg["space"]), weights.read_bytes(), settings)
