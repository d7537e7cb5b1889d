"""Datasets: in-memory train/validation splits, put into Ray's object store once per search.

Built in, with no download: ``digits`` (scikit-learn's 8x8 handwritten digits, 1,797 images, 10 classes)
and ``synthetic`` (a generated Gaussian-blob classification task). Your own data: ``Dataset.from_arrays``
in Python, or a ``.npz`` file with arrays ``x`` and ``y`` (and optionally ``x_val``/``y_val``,
``x_test``/``y_test``) on the CLI; images from disk: ``cifar10:DIR``, ``cifar100:DIR``, ``imagefolder:DIR``
(see :mod:`nas.train.datasets`). Inputs are float32, or uint8 images ``(n, C, H, W)`` that the trainer keeps
as uint8 on the device and normalises on the fly.

>>> ds = load_dataset("digits")
>>> ds.task, len(ds.x_train) + len(ds.x_val)
(Task(input_shape=(1, 8, 8), num_classes=10), 1797)
"""

from __future__ import annotations

import dataclasses
import numbers
import os
import zipfile
from pathlib import Path

import numpy as np

from nas.core.nearest import did_you_mean
from nas.core.space import Task
from nas.core.types import check_seed, python_numbers
from nas.train.labels import as_labels, check_held_out, check_labels

BUILTIN = ("digits", "synthetic", "cifar10:DIR", "cifar100:DIR", "imagefolder:DIR")


@dataclasses.dataclass(frozen=True)
class Dataset:
    """Float32 (or uint8 image) inputs ``(n, *input_shape)`` and int64 labels ``(n,)`` for training and
    validation; optionally a test split, never used by a search (``nas best --evaluate-test`` reads it)."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray | None = None
    y_test: np.ndarray | None = None

    def __post_init__(self) -> None:
        splits = [("train", self.x_train, self.y_train), ("val", self.x_val, self.y_val)]
        if (self.x_test is None) != (self.y_test is None):
            raise ValueError("x_test and y_test must be given together")
        if self.x_test is not None and self.y_test is not None:
            splits.append(("test", self.x_test, self.y_test))
        for split, x, y in splits:
            for array, what in ((x, f"x_{split}"), (y, f"y_{split}")):
                if not isinstance(array, np.ndarray):
                    raise TypeError(f"dataset {self.name!r}: {what} must be a numpy array, got "
                                    f"{type(array).__name__} (Dataset.from_arrays takes lists and converts them)")
            if x.dtype.kind == "f":  # (from_arrays checked it already; a Dataset made directly was not)
                _finite(x, f"x_{split}", self.name)
            if x.dtype != self.x_train.dtype:
                raise ValueError(f"x_{split} is {x.dtype} but x_train is {self.x_train.dtype}; use one dtype")
            if x.ndim < 2:
                raise ValueError(f"x_{split} must have shape (samples, *input_shape), got {x.shape}")
            if y.ndim != 1 or len(y) != len(x):
                raise ValueError(
                    f"y_{split} must have shape ({len(x)},) to match x_{split} {x.shape}, got {y.shape}"
                )
            if len(x) == 0:
                raise ValueError(f"the {split} split of dataset {self.name!r} is empty")
        for split, x, _ in splits[1:]:
            if self.x_train.shape[1:] != x.shape[1:]:
                which = "validation" if split == "val" else split
                raise ValueError(f"train inputs {self.x_train.shape[1:]} and {which} inputs {x.shape[1:]} differ")
        check_labels(self.name, {f"y_{split}": y for split, _, y in splits})

    @property
    def num_classes(self) -> int:
        """The classes the model is trained on: the largest training label + 1 (every split's labels are below)."""
        return int(self.y_train.max()) + 1

    @property
    def task(self) -> Task:
        return Task(input_shape=tuple(int(d) for d in self.x_train.shape[1:]), num_classes=self.num_classes)

    @classmethod
    def from_arrays(
        cls,
        x: np.ndarray,
        y: np.ndarray,
        *,
        x_val: np.ndarray | None = None,
        y_val: np.ndarray | None = None,
        x_test: np.ndarray | None = None,
        y_test: np.ndarray | None = None,
        val_fraction: float = 0.25,
        seed: int = 0,
        name: str = "arrays",
    ) -> Dataset:
        """A dataset from arrays; without ``x_val``/``y_val`` a seeded ``val_fraction`` is held out.
        uint8 arrays stay uint8 (images; channels-last ``(n, H, W, 1|3)`` is turned into ``(n, C, H, W)``),
        anything else becomes float32."""
        for a, b in (("x_val", "y_val"), ("x_test", "y_test")):
            given = {a: x_val if a == "x_val" else x_test, b: y_val if b == "y_val" else y_test}
            if (given[a] is None) != (given[b] is None):
                have, lack = (a, b) if given[b] is None else (b, a)
                raise ValueError(f"dataset {name!r}: {have} is given without {lack}; give both or neither")
        x = _inputs(x, "x", name)
        test = {} if x_test is None or y_test is None else {
            "x_test": _inputs(x_test, "x_test", name), "y_test": as_labels(y_test, "y_test", name)}
        y = np.asarray(y)
        if y.ndim != 1 or len(y) != len(x):
            raise ValueError(f"y must have shape ({len(x)},) to match x {x.shape}, got {y.shape}")
        y = as_labels(y, "y", name)
        if x_val is None or y_val is None:
            if isinstance(val_fraction, bool) or not isinstance(val_fraction, numbers.Real) \
                    or not 0.0 < val_fraction < 1.0:
                raise ValueError(f"val_fraction must be a number in (0, 1), got {val_fraction!r}")
            check_seed(seed)
            order = np.random.default_rng(seed).permutation(len(x))
            n_val = max(1, int(round(len(x) * val_fraction)))
            val, train = order[:n_val], order[n_val:]
            check_held_out(y, train, val, name, f"(val_fraction {val_fraction}, seed {seed})")
            return cls(name, x[train], y[train], x[val], y[val], **test)
        return cls(name, x, y, _inputs(x_val, "x_val", name), as_labels(y_val, "y_val", name), **test)


def _inputs(x: np.ndarray, name: str = "x", dataset: str = "arrays") -> np.ndarray:
    """Images as (n, C, H, W) (stored as (n, H, W, C): transposed), uint8 ones as uint8; other real numbers as
    float32, refused (naming the array and the first bad value's index) where they are no numbers (strings, objects,
    complex), not finite, or past float32's range; an array of examples has two dimensions or more, none of them 0
    but the first."""
    x = np.asarray(x)
    if x.ndim < 2:
        raise ValueError(f"dataset {dataset!r}: {name} has shape {x.shape}; it must hold one row of inputs per "
                         "example, (examples, *input_shape)")
    if 0 in x.shape[1:]:  # (a model of no inputs trained to the majority class's accuracy, silently)
        raise ValueError(f"dataset {dataset!r}: {name} has shape {x.shape}: its examples hold no values")
    if x.dtype.kind not in "biuf":
        raise ValueError(f"dataset {dataset!r}: {name} must hold real numbers, got dtype {x.dtype}")
    if x.ndim == 4 and x.shape[-1] in (1, 3) and x.shape[1] not in (1, 3):
        x = x.transpose(0, 3, 1, 2)  # (n, H, W, C) as images are usually stored (float ones too: they were read as
        # 32 channels of 32x3 pixels, flipped across colours and built on the wrong axes, with no word said)
    if x.dtype != np.uint8:
        with np.errstate(over="ignore", invalid="ignore"):
            x = np.ascontiguousarray(x, dtype=np.float32)
        return _finite(x, name, dataset)
    return np.ascontiguousarray(x)


def _finite(x: np.ndarray, name: str, dataset: str) -> np.ndarray:
    bad = ~np.isfinite(x)
    if bad.any():
        i = np.unravel_index(int(np.argmax(bad)), x.shape)
        raise ValueError(f"dataset {dataset!r}: {name} holds a value that is not a finite float32 (at index "
                         f"{tuple(int(j) for j in i)}): NaN, infinite, or past float32's range")
    return x


def load_dataset(name: str, *, seed: int = 0) -> Dataset:
    """A built-in dataset by name, a ``.npz`` file by path, or images from disk (``cifar10:DIR``,
    ``cifar100:DIR``, ``imagefolder:DIR``, options after ``?``: see :mod:`nas.train.datasets`)."""
    if isinstance(name, os.PathLike):  # (a .npz file's path, as nas.search(data=Path(...)) takes it)
        name = os.fspath(name)
    if not isinstance(name, str):
        raise TypeError(f"a dataset is named by a string (digits, synthetic, a .npz path, cifar10:DIR, ...) or a path, "
                        f"got {name!r} ({type(name).__name__})")
    seed = check_seed(python_numbers(seed))
    if name.partition(":")[0] in ("cifar10", "cifar100", "imagefolder"):
        from nas.train.datasets import load_image_arrays

        full, arrays = load_image_arrays(name, seed=seed)
        return Dataset(full, arrays["x"], arrays["y"], arrays["x_val"], arrays["y_val"],
                       x_test=arrays.get("x_test"), y_test=arrays.get("y_test"))
    if name == "digits":
        from sklearn.datasets import load_digits

        digits = load_digits()
        x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]  # (n, 1, 8, 8) in [0, 1]
        return Dataset.from_arrays(x, digits.target, seed=seed, name="digits")
    if name == "synthetic":
        rng = np.random.default_rng(seed)
        centers = rng.normal(size=(10, 1, 8, 8)).astype(np.float32)
        y = rng.integers(10, size=2000)
        x = centers[y] + rng.normal(scale=1.5, size=(2000, 1, 8, 8)).astype(np.float32)
        return Dataset.from_arrays(x, y, seed=seed, name="synthetic")
    path = Path(name)
    if path.suffix == ".npz":
        if not path.is_file():
            raise ValueError(f"dataset file {name!r} does not exist")
        arrays = _read_npz(path, name)
        if "x" not in arrays or "y" not in arrays:
            raise ValueError(f"dataset file {name!r} needs arrays 'x' and 'y', has {sorted(arrays)}")
        unknown = sorted(set(arrays) - set(NPZ_ARRAYS))
        if unknown:  # (x_valid: a validation split that was never used, its labels never checked)
            raise ValueError(f"dataset file {name!r} holds arrays {unknown} this platform does not read"
                             f"{did_you_mean(unknown, NPZ_ARRAYS)}; allowed: {', '.join(NPZ_ARRAYS)}")
        return Dataset.from_arrays(arrays["x"], arrays["y"], x_val=arrays.get("x_val"), y_val=arrays.get("y_val"),
                                   x_test=arrays.get("x_test"), y_test=arrays.get("y_test"), seed=seed, name=path.stem)
    near = did_you_mean(name, [b.partition(":")[0] for b in BUILTIN])
    raise ValueError(f"unknown dataset {name!r}{near}; known: {', '.join(BUILTIN)}, or a path to a .npz file")


NPZ_ARRAYS = ("x", "y", "x_val", "y_val", "x_test", "y_test")  # what a .npz dataset may hold


def _read_npz(path: Path, name: str) -> dict[str, np.ndarray]:
    """The arrays of a .npz file, read as data (never pickle): a one-line ValueError naming the file (and the array)
    when it is no .npz archive or an array holds Python objects."""
    try:
        f = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise ValueError(f"dataset file {name!r} is not a .npz archive of arrays ({type(e).__name__})") from None
    if not isinstance(f, np.lib.npyio.NpzFile):
        raise ValueError(f"dataset file {name!r} holds one array (.npy), not a .npz archive with arrays 'x' and 'y'")
    with f:
        out = {}
        for key in f.files:
            try:
                out[key] = f[key]
            except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
                why = "Python objects, which are never unpickled" if "allow_pickle" in str(e) else type(e).__name__
                raise ValueError(f"dataset file {name!r}: array {key!r} cannot be read as numbers ({why})") from None
        return out


def dataset_fingerprint(ds: object) -> str:
    """The identity of a dataset's content: its array count and bytes, and a hash of every array (dtype,
    shape, values), whatever their dtype (float32, uint8...). Two datasets with the same name but other
    content differ here.

    >>> a = Dataset.from_arrays(np.zeros((8, 2), np.float32), np.arange(8) % 2, name="d")
    >>> b = Dataset.from_arrays(np.ones((8, 2), np.float32), np.arange(8) % 2, name="d")
    >>> dataset_fingerprint(a) == dataset_fingerprint(a), dataset_fingerprint(a) == dataset_fingerprint(b)
    (True, False)
    """
    import hashlib

    arrays = sorted((k, v) for k, v in vars(ds).items() if isinstance(v, np.ndarray))
    h = hashlib.blake2b(digest_size=16)
    nbytes = 0
    for key, arr in arrays:
        arr = np.ascontiguousarray(arr)
        h.update(f"{key}:{arr.dtype.str}:{arr.shape};".encode())
        h.update(arr.reshape(-1).view(np.uint8).data)
        nbytes += arr.nbytes
    return f"{len(arrays)} arrays, {nbytes} bytes, blake2b {h.hexdigest()}"
