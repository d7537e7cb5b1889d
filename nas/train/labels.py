"""Labels are class indices: every label array (train, validation, test) is checked against the class count before
anything trains, naming the array, the bad value and its index; non-integer labels are refused, never truncated.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

log = logging.getLogger(__name__)

MAX_SANE_CLASSES = 100_000  # more than ImageNet-21k's; a label past it is most likely not a class index
MAX_CLASSES = 10_000_000  # past it a head is refused: 8 features into it make 80M weights, past --max-params' default


def check_labels(dataset: str, labels: dict[str, np.ndarray], classes: int | None = None) -> None:
    """Every label array (``y_train``, ``y_val``, ``y_test``) holds integer class indices in ``0..classes-1``
    (``classes``: the training labels' largest + 1 unless given): a ValueError naming the array, the bad value and
    its index otherwise; a warning when the class count is not sane (more classes than training samples, or over
    MAX_SANE_CLASSES: a label such as 1e6 builds a head that large).

    >>> check_labels("d", {"y_train": np.array([0, 1, 2]), "y_val": np.array([1, 3])})
    Traceback (most recent call last):
    ...
    ValueError: dataset 'd': y_val holds label 3 (index 1), but the training labels give 3 classes (0..2)
    """
    for name, y in labels.items():
        if y.dtype.kind not in "iu":
            raise ValueError(f"dataset {dataset!r}: {name} must hold integer class indices, got dtype {y.dtype}")
        _non_negative(y, name, dataset)
    if classes is None:
        classes = int(labels["y_train"].max()) + 1
    if classes > MAX_CLASSES:
        i = int(np.argmax(labels["y_train"]))
        raise ValueError(f"dataset {dataset!r}: y_train holds label {int(labels['y_train'][i])} (index {i}): "
                         f"{classes:,} classes, past the {MAX_CLASSES:,} a classifier head here may have; labels "
                         "are class indices 0..classes-1")
    if len(np.unique(labels["y_train"])) < 2:
        raise ValueError(f"dataset {dataset!r}: y_train holds one class ({int(labels['y_train'][0])}) only: a "
                         "classifier needs examples of two classes or more")
    for name, y in labels.items():
        if len(y) and y.max() >= classes:
            i = int(np.argmax(y))
            raise ValueError(f"dataset {dataset!r}: {name} holds label {int(y[i])} (index {i}), but the training "
                             f"labels give {classes} classes (0..{classes - 1})")
    n = len(labels["y_train"])
    if classes > MAX_SANE_CLASSES or classes > n:
        log.warning("dataset %r: its labels give %d classes (the largest training label + 1) for %d training "
                    "samples: a classifier head that large; check the labels", dataset, classes, n)


def check_held_out(y: np.ndarray, train: np.ndarray, val: np.ndarray, dataset: str, how: str,
                   classes: Sequence[str] = ()) -> None:
    """A ValueError, in the words of the one label array ``y`` the user gave, where a seeded hold-out (``train``
    and ``val``: indices into ``y``) put every example of a class into validation: no model can learn it (and
    above the training labels' largest it was refused as a label of ``y_val``, at an index of an array the user
    never gave). ``classes``: the classes' names.

    >>> check_held_out(np.array([0, 1, 2, 0, 2]), np.array([0, 2, 3, 4]), np.array([1]), "d", "(seed 0)")
    Traceback (most recent call last):
    ...
    ValueError: dataset 'd': class 1 has 1 example(s), all held out for validation (seed 0): no model learns it; ...
    """
    missing = np.setdiff1d(y[val], y[train])
    if missing.size:
        c = int(missing[0])
        named = f"class {classes[c]!r}" if c < len(classes) else f"class {c}"
        raise ValueError(f"dataset {dataset!r}: {named} has {int((y == c).sum())} example(s), all held out for "
                         f"validation {how}: no model learns it; give it more examples, or a validation split of "
                         "your own")


def as_labels(y: np.ndarray, name: str, dataset: str) -> np.ndarray:
    """``y`` as int64 class indices; floats only when every value is a whole number (never truncated)."""
    y = np.asarray(y)
    if y.dtype.kind == "b":  # (True/False are no class indices: a mask saved in place of the labels, most likely)
        raise ValueError(f"dataset {dataset!r}: {name} holds booleans; labels are integer class indices")
    if y.dtype.kind == "u" and len(y) and int(y.max()) > np.iinfo(np.int64).max:
        i = int(np.argmax(y))
        raise ValueError(f"dataset {dataset!r}: {name} holds label {int(y[i])} (index {i}), past any class count")
    if y.dtype.kind == "f":
        bad = ~np.isfinite(y) | (y != np.round(y)) | (np.abs(y) >= 2**53)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"dataset {dataset!r}: {name} holds the non-integer label {float(y[i])!r} (index {i}); "
                             "labels are class indices")
    elif y.dtype.kind not in "iu":
        raise ValueError(f"dataset {dataset!r}: {name} must hold integer class indices, got dtype {y.dtype}")
    return _non_negative(y.astype(np.int64), name, dataset)  # (checked here, on the array the user named)


def _non_negative(y: np.ndarray, name: str, dataset: str) -> np.ndarray:
    if len(y) and y.min() < 0:
        i = int(np.argmin(y))
        raise ValueError(f"dataset {dataset!r}: {name} holds label {int(y[i])} (index {i}); labels are class "
                         "indices >= 0")
    return y


__all__ = ["MAX_CLASSES", "MAX_SANE_CLASSES", "as_labels", "check_held_out", "check_labels"]
