"""Image datasets from a local directory, never downloaded: CIFAR-10/100 as distributed (the python-pickle
batches), and folders of images with one sub-folder per class (the layout torchvision's ImageFolder reads).

Dataset specs (what ``--dataset`` takes): ``cifar10:DIR``, ``cifar100:DIR``, ``imagefolder:DIR``, with
options after a ``?``: ``val`` (the validation hold-out, a fraction in (0, 1) or a number of images;
default 0.1) and, for image folders, ``size`` (images are resized to size x size; default 32). Example:
``imagefolder:photos?size=64&val=0.2``. The validation split is a seeded hold-out of the TRAINING set;
a test set (CIFAR's ``test_batch`` / ``test``) is kept apart as ``x_test``/``y_test`` and never used for
search (``nas best RUN --evaluate-test`` reports it for the chosen architecture only).

The CIFAR files are pickles. They are read with a restricted unpickler that can build only what they
hold (dicts, lists, strings, numpy uint8 arrays): anything else is refused, so a crafted file cannot
run code (the standard library's ``pickle.load`` would).

>>> import tempfile, numpy as np
>>> d = tempfile.mkdtemp()
>>> write_cifar(d, "cifar10", np.zeros((20, 3, 32, 32), np.uint8), list(range(10)) * 2,
...             np.zeros((10, 3, 32, 32), np.uint8), list(range(10)))
>>> name, a = load_image_arrays(f"cifar10:{d}?val=4")
>>> name.startswith("cifar10:"), a["x"].dtype, a["x"].shape, a["x_val"].shape, a["x_test"].shape
(True, dtype('uint8'), (16, 3, 32, 32), (4, 3, 32, 32), (10, 3, 32, 32))
"""

from __future__ import annotations

import codecs
import math
import pickle
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nas.train.labels import check_held_out, check_labels

KINDS = ("cifar10", "cifar100", "imagefolder")
CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar.html"
#: file names of each CIFAR variant: (training files, test file, meta file, label key)
CIFAR_FILES = {
    "cifar10": ([f"data_batch_{i}" for i in range(1, 6)], "test_batch", "batches.meta", "labels"),
    "cifar100": (["train"], "test", "meta", "fine_labels"),
}
CIFAR_FOLDER = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}
#: what torchvision's ImageFolder accepts
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
OPTIONS = {"cifar10": ("val",), "cifar100": ("val",), "imagefolder": ("val", "size")}


def _latin1_encode(text: str, encoding: str = "latin1") -> bytes:
    """``_codecs.encode`` as protocol-2 pickles use it for bytes, restricted to latin-1."""
    if codecs.lookup(encoding).name != "iso8859-1":
        raise pickle.UnpicklingError(f"refused codec {encoding!r} (only latin-1 occurs in these files)")
    return text.encode("latin1")


def _allowed() -> dict[tuple[str, str], Any]:
    from numpy._core import multiarray

    reconstruct = multiarray._reconstruct  # type: ignore[attr-defined]
    return {("numpy.core.multiarray", "_reconstruct"): reconstruct,
            ("numpy._core.multiarray", "_reconstruct"): reconstruct,
            ("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype,
            ("_codecs", "encode"): _latin1_encode}


class SafeUnpickler(pickle.Unpickler):
    """Builds dicts, lists, strings, bytes and numpy arrays; refuses every other global (no code runs)."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _allowed()[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refused to load {module}.{name}: not part of a CIFAR batch") from None


def read_pickle(path: Path) -> dict[str, Any]:
    """A CIFAR batch file as a dict with str keys (Python 2 files have bytes keys; both are read)."""
    try:
        with open(path, "rb") as f:
            obj = SafeUnpickler(f, encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, ImportError,
            IndexError, KeyError) as e:
        raise ValueError(f"{path}: not a CIFAR python batch file ({type(e).__name__}: {e})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: not a CIFAR python batch file (holds a {type(obj).__name__}, expected a dict)")
    return {k.decode("latin1") if isinstance(k, bytes) else str(k): v for k, v in obj.items()}


def parse_spec(spec: str) -> tuple[str, Path, dict[str, str]]:
    """``"kind:DIR?key=value&..."`` -> (kind, DIR, options), options checked by name."""
    kind, _, rest = spec.partition(":")
    path, _, query = rest.partition("?")
    if kind not in KINDS or not path:
        raise ValueError(f"dataset {spec!r} is not KIND:DIR with KIND one of {', '.join(KINDS)}")
    options: dict[str, str] = {}
    for pair in filter(None, query.split("&")):
        key, sep, value = pair.partition("=")
        if not sep or key not in OPTIONS[kind]:
            raise ValueError(f"dataset option {pair!r} in {spec!r} is not KEY=VALUE with KEY one of "
                             f"{', '.join(OPTIONS[kind])}")
        if key in options:
            raise ValueError(f"dataset option {key!r} is given twice in {spec!r}")
        options[key] = value
    try:
        return kind, Path(path).expanduser(), options
    except RuntimeError:  # ("~nobody/x": Python cannot find that user's home)
        raise ValueError(f"dataset {spec!r}: {path!r} names the home of a user this machine does not have") from None


def _number(text: str | float | int, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"dataset option {what} must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"dataset option {what} must be a finite number, got {text!r}")
    return value


def val_indices(n: int, val: float | int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A seeded hold-out: ``val`` is a fraction in (0, 1) or a count in [1, n - 1]. Returns (train, val)."""
    count = int(round(n * val)) if 0 < val < 1 else int(val)
    if val <= 0 or val != int(val) and val >= 1 or not 1 <= count <= n - 1:
        raise ValueError(f"val={val!r} must be a fraction in (0, 1) or a number of images in [1, {n - 1}] "
                         f"(the training set has {n})")
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[count:]), np.sort(order[:count])


def find_cifar_dir(kind: str, root: Path) -> Path:
    """``root`` or its extracted archive folder (``cifar-10-batches-py``), whichever holds the files."""
    if not root.is_dir():
        raise ValueError(f"{kind} directory {str(root)!r} does not exist; nothing is downloaded: get "
                         f"{kind.replace('cifar', 'cifar-')}-python.tar.gz from {CIFAR_URL} and extract it there")
    inner = root / CIFAR_FOLDER[kind]
    train_files, *_ = CIFAR_FILES[kind]
    return inner if inner.is_dir() and not (root / train_files[0]).exists() else root


def load_cifar(kind: str, root: Path, *, val: float | int = 0.1, seed: int = 0) -> dict[str, Any]:
    """Arrays of CIFAR-10 or CIFAR-100 (fine labels) from the python batches in ``root``."""
    folder = find_cifar_dir(kind, root)
    train_files, test_file, meta_file, label_key = CIFAR_FILES[kind]
    for name in [*train_files, test_file, meta_file]:
        if not (folder / name).is_file():
            raise ValueError(f"{kind} directory {str(folder)!r} has no file {name!r}; expected "
                             f"{', '.join([*train_files, test_file, meta_file])} as in "
                             f"{kind.replace('cifar', 'cifar-')}-python.tar.gz from {CIFAR_URL}")

    def batch(name: str) -> tuple[np.ndarray, np.ndarray]:
        path = folder / name
        d = read_pickle(path)
        if "data" not in d or label_key not in d:
            raise ValueError(f"{path}: a {kind} batch needs keys 'data' and {label_key!r}, has {sorted(d)}")
        x, y = d["data"], np.asarray(d[label_key])
        if not isinstance(x, np.ndarray) or x.dtype != np.uint8 or x.ndim != 2 or x.shape[1] != 3072:
            raise ValueError(f"{path}: 'data' must be a uint8 array of shape (n, 3072), got "
                             f"{getattr(x, 'dtype', type(x).__name__)} {getattr(x, 'shape', '')}")
        if y.shape != (len(x),) or not np.issubdtype(y.dtype, np.integer):
            raise ValueError(f"{path}: {label_key!r} must hold {len(x)} integer labels, got shape {y.shape}")
        return x.reshape(-1, 3, 32, 32), y.astype(np.int64)

    parts = [batch(name) for name in train_files]
    x, y = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    x_test, y_test = batch(test_file)
    meta = read_pickle(folder / meta_file)
    names = meta.get("label_names") or meta.get("fine_label_names") or []
    train, held = val_indices(len(x), val, seed)
    if names:  # the classes the files name: every label must be one of them
        check_labels(f"{kind}:{root}", {"y_train": y, "y_test": y_test}, classes=len(names))
    return {"x": x[train], "y": y[train], "x_val": x[held], "y_val": y[held], "x_test": x_test, "y_test": y_test,
            "classes": [str(n) for n in names]}


def load_image_folder(root: Path, *, size: int = 32, val: float | int = 0.1, seed: int = 0) -> dict[str, Any]:
    """Every image under ``root/<class>/``, RGB, resized to ``size`` x ``size``, as uint8 (n, 3, size, size)."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"image size must be a positive integer, got {size!r}")
    if not root.is_dir():
        raise ValueError(f"image folder {str(root)!r} does not exist; put one sub-folder per class there, "
                         f"each holding that class's images (e.g. {root}/cat/001.jpg)")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        loose = [p.name for p in root.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS]
        raise ValueError(f"image folder {str(root)!r} has no class sub-folders" + (
            f" (it holds images such as {loose[0]!r} directly)" if loose else "") +
            f"; expected one sub-folder per class, e.g. {root}/cat/001.jpg")
    images, labels = [], []
    for label, cls in enumerate(classes):
        files = sorted(p for p in (root / cls).iterdir()
                       if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS and not p.name.startswith("."))
        if not files:
            raise ValueError(f"class folder {str(root / cls)!r} holds no images; expected files ending in "
                             f"{', '.join(IMAGE_EXTENSIONS)}")
        for path in files:
            try:
                with Image.open(path) as im:
                    rgb = im.convert("RGB").resize((size, size), Image.Resampling.BILINEAR)
                images.append(np.asarray(rgb, dtype=np.uint8).transpose(2, 0, 1))
            except (UnidentifiedImageError, Image.DecompressionBombError, OSError, ValueError) as e:
                raise ValueError(f"image {str(path)!r} cannot be read ({type(e).__name__}: {e}); expected an "
                                 f"image file") from None
            labels.append(label)
    if len(classes) < 2:
        raise ValueError(f"image folder {str(root)!r} has one class folder ({classes[0]!r}); expected at least 2")
    x, y = np.stack(images), np.asarray(labels, dtype=np.int64)
    train, held = val_indices(len(x), val, seed)
    check_held_out(y, train, held, f"imagefolder:{root}", f"(val {val}, seed {seed})", classes)
    return {"x": x[train], "y": y[train], "x_val": x[held], "y_val": y[held], "classes": classes}


def load_image_arrays(spec: str, *, seed: int = 0, val: float | int | None = None,
                      size: int | None = None) -> tuple[str, dict[str, Any]]:
    """The dataset's name and arrays (x, y, x_val, y_val, and x_test, y_test where it has a test split) from
    ``cifar10:DIR``, ``cifar100:DIR`` or ``imagefolder:DIR`` (keyword arguments override the spec's
    ``?val=``/``?size=`` options); :func:`nas.train.data.load_dataset` makes the Dataset."""
    kind, root, options = parse_spec(spec)
    v = val if val is not None else _number(options.get("val", 0.1), "val")
    if kind == "imagefolder":
        s: Any = size if size is not None else _number(options.get("size", 32), "size")
        if isinstance(s, float) and s.is_integer():
            s = int(s)
        arrays = load_image_folder(root, size=s, val=v, seed=seed)
    else:
        arrays = load_cifar(kind, root, val=v, seed=seed)
    return f"{kind}:{root.name or root}", arrays


def write_cifar(root: str | Path, kind: str, x: np.ndarray, y: Sequence[int], x_test: np.ndarray,
                y_test: Sequence[int], *, classes: Sequence[str] | None = None, batches: int = 5) -> None:
    """Write arrays in CIFAR's python format (protocol-2 pickles of dicts; ``data`` a uint8 (n, 3072) array,
    labels a list), as the distributed files are: for tests and for users converting their own data."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    train_files, test_file, meta_file, label_key = CIFAR_FILES[kind]
    n_classes = 10 if kind == "cifar10" else 100
    names = list(classes or [f"class{i}" for i in range(n_classes)])

    def dump(name: str, obj: Mapping[str, Any]) -> None:
        with open(root / name, "wb") as f:
            pickle.dump(dict(obj), f, protocol=2)

    flat = np.ascontiguousarray(x, dtype=np.uint8).reshape(len(x), -1)
    chunks = np.array_split(np.arange(len(flat)), len(train_files) if kind == "cifar100" else batches)
    for name, idx in zip(train_files, chunks):
        dump(name, {"batch_label": name, "data": flat[idx], label_key: [int(y[i]) for i in idx],
                    "filenames": [f"{i}.png" for i in idx]})
    dump(test_file, {"batch_label": test_file, "data": np.ascontiguousarray(x_test, np.uint8).reshape(len(x_test), -1),
                     label_key: [int(v) for v in y_test]})
    dump(meta_file, {"label_names" if kind == "cifar10" else "fine_label_names": names,
                     "num_cases_per_batch": len(chunks[0])})
