"""Strategy and scheduler snapshots as data: a JSON file plus, for arrays, a companion safetensors file.

Nothing read back can execute code: the structure is JSON, the numbers of numpy arrays and torch tensors
are safetensors (a header and raw bytes), and both are parsed by libraries that build only plain values.
A pickle, or anything else that is not a snapshot of this format and version, is refused with a
ValueError naming the file, without being run.

What JSON cannot hold is written as a small tagged object (``{"__nas__": tag, ...}``) and decoded back
to its own type: dicts with non-string keys (int keys stay ints), tuples, numpy scalars (dtype kept),
ints beyond 2**53 (a PCG64 state), NaN and infinities, bytes, and arrays (numpy stays numpy, torch stays
torch, dtypes and shapes kept). Arrays go to ``<name>.<hash>.safetensors`` beside the JSON, whose name
carries a hash of its content; it is written first and the JSON, which names it, last. Each is replaced
atomically (a temporary file, fsync, rename), so a crash at any point leaves the previous pair whole: the
old JSON names the old tensor file, which is removed only after the new JSON is in place.

>>> import pathlib, tempfile, numpy as np, torch
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> state = {"rng": np.random.default_rng(0).bit_generator.state, "scores": {3: float("nan")},
...          "w": torch.ones(2, dtype=torch.float16), "a": np.arange(3, dtype=np.int8), "pair": (1, 2)}
>>> n = write_snapshot(d / "strategy.json", state)
>>> back = read_snapshot(d / "strategy.json")
>>> back["rng"] == state["rng"], back["scores"], back["w"].dtype, back["a"].dtype, back["pair"]
(True, {3: nan}, torch.float16, dtype('int8'), (1, 2))
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import pathlib
import re
import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from nas.run.files import atomic_write, load_json, read_file

if TYPE_CHECKING:
    import torch

FORMAT = "nas-snapshot"
VERSION = 1
TAG = "__nas__"
MAX_SAFE_INT = 2**53  # beyond this, JSON readers other than Python's lose digits: kept as a string


def write_snapshot(path: pathlib.Path, payload: dict) -> int:
    """Write ``payload`` to ``path`` (JSON) and, if it holds arrays, a companion safetensors file;
    return the bytes written. Raises ValueError naming the first value that cannot be stored as data."""
    path = pathlib.Path(path)
    if not isinstance(payload, dict):
        raise ValueError(f"a snapshot payload is a dict, got {type(payload).__name__}")
    tensors: dict[str, torch.Tensor] = {}
    body = _encode(payload, tensors, "payload")
    written = 0
    tensor_file: dict[str, Any] | None = None
    if tensors:
        from safetensors import SafetensorError  # (torch and safetensors only where a payload holds arrays)
        from safetensors.torch import save as save_tensors

        try:
            blob = save_tensors(tensors)
        except (SafetensorError, ValueError, RuntimeError, TypeError) as e:
            raise ValueError(f"{path}: the payload's arrays cannot be stored as safetensors ({e})") from None
        digest = hashlib.sha256(blob).hexdigest()
        tensor_file = {"file": f"{path.name}.{digest[:16]}.safetensors", "sha256": digest, "bytes": len(blob)}
        atomic_write(path.parent / tensor_file["file"], blob)
        written += len(blob)
    doc = {"format": FORMAT, "version": VERSION, "tensors": tensor_file, "payload": body}
    text = json.dumps(doc, allow_nan=False, separators=(",", ":")).encode()
    atomic_write(path, text)
    written += len(text)
    keep = None if tensor_file is None else tensor_file["file"]
    generation = re.compile(re.escape(path.name) + r"\.[0-9a-f]{16}\.safetensors")
    for old in path.parent.iterdir():  # earlier generations, now unreferenced
        if old.name != keep and generation.fullmatch(old.name):
            old.unlink(missing_ok=True)
    return written


def read_snapshot(path: pathlib.Path) -> dict:
    """The payload :func:`write_snapshot` wrote to ``path``. Raises ValueError naming the file if it is
    missing, corrupt, a pickle, or of another format or version."""
    path = pathlib.Path(path)
    try:
        raw = read_file(path)
    except OSError as e:
        raise ValueError(f"{path}: cannot read the snapshot ({e.strerror or e})") from None
    if raw[:1] == b"\x80":  # the PROTO opcode that starts every pickle of protocol 2 and later
        raise ValueError(f"{path}: is a pickle, not a JSON snapshot; refusing to load it")
    try:
        doc = load_json(raw)
    except (ValueError, RecursionError) as e:
        raise ValueError(f"{path}: is not a JSON snapshot ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"{path}: is not a {FORMAT} file")
    if doc.get("version") != VERSION:
        raise ValueError(f"{path}: snapshot version {doc.get('version')!r} is not supported (this is {VERSION})")
    tensors: dict[str, torch.Tensor] = {}
    meta = doc.get("tensors")
    if meta is not None:
        tensors = _read_tensors(path, meta)
    try:
        payload = _decode(doc.get("payload"), tensors)
    except (KeyError, TypeError, ValueError, OverflowError, RecursionError) as e:
        raise ValueError(f"{path}: corrupt snapshot payload ({e})") from None
    if not isinstance(payload, dict):
        raise ValueError(f"{path}: corrupt snapshot payload (not a mapping)")
    return payload


def _read_tensors(path: pathlib.Path, meta: Any) -> dict[str, torch.Tensor]:
    if not (isinstance(meta, dict) and isinstance(meta.get("file"), str) and isinstance(meta.get("sha256"), str)):
        raise ValueError(f"{path}: corrupt snapshot (bad tensor file entry {meta!r})")
    name = meta["file"]
    if pathlib.PurePath(name).name != name or not name.endswith(".safetensors"):
        raise ValueError(f"{path}: the tensor file {name!r} must be a .safetensors file beside the snapshot")
    tpath = path.parent / name
    try:
        blob = read_file(tpath)
    except OSError as e:
        raise ValueError(f"{tpath}: the snapshot's tensor file cannot be read ({e.strerror or e})") from None
    if hashlib.sha256(blob).hexdigest() != meta["sha256"]:
        raise ValueError(f"{tpath}: the tensor file does not match the hash its snapshot {path.name} records")
    from safetensors import SafetensorError
    from safetensors.torch import load as load_tensors

    try:
        return load_tensors(blob)
    except (SafetensorError, ValueError, RuntimeError) as e:
        raise ValueError(f"{tpath}: is not a safetensors file ({e})") from None


def _tagged(tag: str, **fields: Any) -> dict[str, Any]:
    return {TAG: tag, **fields}


class _Unstorable(ValueError):
    """A value that is not data; ``path`` is filled in on the way out of the recursion (no cost otherwise)."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what, self.path = what, ""


def _encode(value: Any, tensors: dict[str, torch.Tensor], where: str) -> Any:
    """``value`` as JSON data; arrays are moved into ``tensors`` and referred to by name. A ValueError
    names the first value (by its path below ``where``) that cannot be stored."""
    try:
        return _enc(value, tensors)
    except _Unstorable as e:
        raise ValueError(f"{where}{e.path}: {e.what}") from None


def _enc(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, float) and not isinstance(value, np.generic):
        return value if math.isfinite(value) else _tagged("float", value=repr(float(value)))
    if isinstance(value, int) and not isinstance(value, np.generic):
        return int(value) if -MAX_SAFE_INT <= value <= MAX_SAFE_INT else _tagged("int", value=str(int(value)))
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and TAG not in value:
            return {k: _child(v, tensors, k) for k, v in value.items()}
        for k in value:
            if not isinstance(k, (str, int, float, bool, tuple)) and k is not None:
                raise _Unstorable(f"dict key {k!r} of type {type(k).__name__} cannot be stored as data")
        return _tagged("dict", items=[[_enc(k, tensors), _child(v, tensors, k)] for k, v in value.items()])
    if isinstance(value, list):
        return [_child(v, tensors, i) for i, v in enumerate(value)]
    if isinstance(value, tuple):
        return _tagged("tuple", items=[_child(v, tensors, i) for i, v in enumerate(value)])
    if isinstance(value, np.ndarray) or _is_tensor(value):
        return _encode_array(value, tensors)
    if isinstance(value, np.generic):
        if value.dtype.kind not in "biuf":
            raise _Unstorable(f"numpy scalar of dtype {value.dtype} cannot be stored as data")
        return _tagged("npscalar", dtype=value.dtype.str, value=_enc(value.item(), tensors))
    if isinstance(value, bytes):
        return _tagged("bytes", value=base64.b64encode(value).decode())
    raise _Unstorable(f"a {type(value).__name__} cannot be stored in a snapshot; allowed: None, bool, int, "
                      f"float, str, bytes, list, tuple, dict, numpy arrays and scalars, torch tensors")


def _child(value: Any, tensors: dict[str, torch.Tensor], key: Any) -> Any:
    try:
        return _enc(value, tensors)
    except _Unstorable as e:
        e.path = f"[{key!r}]{e.path}"
        raise


def _is_tensor(value: Any) -> bool:
    """Whether ``value`` is a torch tensor, without importing torch: none exists before torch is imported."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _encode_array(value: np.ndarray | torch.Tensor, tensors: dict[str, torch.Tensor]) -> Any:
    import torch

    name = f"t{len(tensors)}"
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided:
            raise _Unstorable(f"a {value.layout} tensor cannot be stored; only dense tensors")
        tensors[name] = value.detach().to("cpu", copy=True).contiguous()
        return _tagged("torch", name=name, device=str(value.device))
    if value.dtype.kind not in "biufc" or value.dtype.hasobject:
        raise _Unstorable(f"a numpy array of dtype {value.dtype} cannot be stored as data")
    native = value.astype(value.dtype.newbyteorder("="), order="C", copy=True)  # keeps 0-d arrays 0-d
    try:
        tensors[name] = torch.from_numpy(native)
    except TypeError:
        raise _Unstorable(f"a numpy array of dtype {value.dtype} cannot be stored as data") from None
    return _tagged("numpy", name=name, dtype=value.dtype.str)


def _decode(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, list):
        return [_decode(v, tensors) for v in value]
    if not isinstance(value, dict):
        return value
    if TAG not in value:
        return {k: _decode(v, tensors) for k, v in value.items()}
    tag = value[TAG]
    if tag == "dict":
        return {_decode(k, tensors): _decode(v, tensors) for k, v in value["items"]}
    if tag == "tuple":
        return tuple(_decode(v, tensors) for v in value["items"])
    if tag == "int":
        return int(value["value"])
    if tag == "float":
        f = float(value["value"])
        if math.isfinite(f):
            raise ValueError(f"a tagged float must be nan or infinite, got {value['value']!r}")
        return f
    if tag == "bytes":
        return base64.b64decode(value["value"], validate=True)
    if tag == "npscalar":
        return _numpy_dtype(value["dtype"]).type(_decode(value["value"], tensors))
    if tag == "numpy":
        return tensors[value["name"]].numpy().astype(_numpy_dtype(value["dtype"]), copy=False)
    if tag == "torch":
        return tensors[value["name"]]  # on the CPU: the reader moves it where it is needed
    raise ValueError(f"unknown tag {tag!r}")


def _numpy_dtype(text: Any) -> np.dtype:
    dtype = np.dtype(str(text))
    if dtype.kind not in "biufc" or dtype.hasobject:
        raise ValueError(f"dtype {text!r} is not a numeric dtype")
    return dtype
