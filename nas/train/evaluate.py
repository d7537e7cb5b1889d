"""The test-set accuracy of a trained candidate: a checkpoint's weights on the dataset's test split, which no
search ever reads (``nas best RUN --evaluate-test`` calls it through :mod:`nas.monitor.testset`).

The inputs are normalised with the training split's statistics as in training, and the weights read with
``torch.load(weights_only=True)`` (data, never code).
"""

from __future__ import annotations

import io
from typing import Any

import torch

from nas.train.data import Dataset


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
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:  # (weights of another space: one line, not a traceback)
        raise ValueError(f"the checkpoint's weights do not fit {type(space).__name__}'s model of its architecture: "
                         f"{str(e).splitlines()[-1].strip()}") from None
    loss, acc = side.evaluate(model)
    return {"test_loss": loss, "test_acc": acc, "test_images": len(data.x_test), "arch": state["arch"],
            "epoch": int(state["epoch"])}
