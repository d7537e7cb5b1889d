"""The trained supernet's weights file, ``supernet.safetensors`` in its run directory: the supernet's tensors and,
in the safetensors header, what they belong to (format, the space's spec, the task, the epochs trained).

This module defines the file; the run directory's owner (:mod:`nas.run.supernet_store`) writes it atomically,
and sub-network evaluation (:mod:`nas.train.supernet_eval`) reads it on each worker. Reading runs no code: the
header is JSON strings, the tensors raw bytes, both parsed by safetensors; the bytes read are checked against
the SHA-256 the reader was handed, so every worker of a search evaluates the same weights.

>>> import tempfile, torch
>>> from pathlib import Path
>>> from nas.core.space import Task
>>> from nas.search_spaces.macro import MacroSpace
>>> space, task, d = MacroSpace(), Task((4,), 2), Path(tempfile.mkdtemp())
>>> _ = (d / WEIGHTS).write_bytes(weights_bytes(space.supernet(task), space_spec=space.spec(), epoch=3))
>>> info = read_info(d)
>>> info.space_spec, info.task, info.epoch
({'class': 'macro', 'args': {}}, Task(input_shape=(4,), num_classes=2), 3)
>>> sorted(load_weights(info))[:2]
['classifier.bias', 'classifier.weight']
>>> read_info(d / "nowhere")
Traceback (most recent call last):
...
ValueError: supernet directory '.../nowhere' does not exist
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from nas.core.space import Task
from nas.core.types import SupernetChanged
from nas.core.weight_sharing import Supernet

WEIGHTS = "supernet.safetensors"
FORMAT, VERSION = "nas-supernet", "1"


@dataclasses.dataclass(frozen=True)
class SupernetInfo:
    """What a supernet's weights file says of itself, and its SHA-256."""

    path: Path
    sha256: str
    space_spec: dict[str, Any]
    task: Task
    epoch: int
    shapes: dict[str, tuple[int, ...]]


def weights_bytes(supernet: Supernet, *, space_spec: dict[str, Any], epoch: int) -> bytes:
    """``supernet``'s tensors (on the CPU) and header as the bytes of a weights file."""
    task = supernet.task
    state = {k: v.detach().cpu().contiguous() for k, v in supernet.state_dict().items()}
    return _sorted_header(save_tensors(state, metadata={
        "format": FORMAT, "version": VERSION, "space_spec": json.dumps(space_spec), "epoch": str(int(epoch)),
        "task": json.dumps({"input_shape": list(task.input_shape), "num_classes": task.num_classes})}))


def _sorted_header(blob: bytes) -> bytes:
    """``blob``, a safetensors file, with its header's keys sorted. safetensors writes the metadata from a hash
    map, in an order that differs from call to call, so equal tensors gave files of another SHA-256 each time (and a
    search recording the sha refused a supernet rewritten with the same weights). The tensors' offsets are in
    the header, so its order means nothing to a reader; the header is padded to 8 bytes with spaces, as
    safetensors pads it."""
    size = int.from_bytes(blob[:8], "little")
    header = json.dumps(json.loads(blob[8:8 + size]), sort_keys=True, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)
    return len(header).to_bytes(8, "little") + header + blob[8 + size:]


def read_info(run_dir: str | os.PathLike[str]) -> SupernetInfo:
    """The header of ``run_dir``'s weights file; a one-line ValueError when there is none or it is not one."""
    path = Path(run_dir)
    if not path.is_dir():
        raise ValueError(f"supernet directory {str(path)!r} does not exist")
    file = path.resolve() / WEIGHTS  # (absolute: workers may run in another directory)
    if not file.is_file():
        resume = " --resume" if (path / "run.json").is_file() else ""  # (a run killed before its first epoch)
        raise ValueError(f"{str(path)!r} holds no trained supernet (no {WEIGHTS}; train one with "
                         f"`nas supernet train{resume} --run-dir {path}`)")
    data = file.read_bytes()
    try:
        with safe_open(str(file), framework="pt") as f:
            meta = f.metadata() or {}
            shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118 (safe_open has no __iter__)
        if meta.get("format") != FORMAT or meta.get("version") != VERSION:
            raise ValueError(f"format {meta.get('format')!r} version {meta.get('version')!r}")
        task = json.loads(meta["task"])
        info = SupernetInfo(file, hashlib.sha256(data).hexdigest(), json.loads(meta["space_spec"]),
                            Task(tuple(int(d) for d in task["input_shape"]), int(task["num_classes"])),
                            int(meta["epoch"]), shapes)
        if not all(d >= 1 for d in info.task.input_shape) or info.task.num_classes < 2 or info.epoch < 0:
            raise ValueError(f"task {task!r}, epoch {info.epoch}: sizes must be >= 1, classes >= 2")
    except (SafetensorError, ValueError, KeyError, TypeError, OSError, OverflowError, RecursionError) as e:
        raise ValueError(f"{file} is not a supernet weights file of this version ({FORMAT} {VERSION}): "
                         f"{type(e).__name__}: {e}") from None
    if not isinstance(info.space_spec, dict) or not isinstance(info.space_spec.get("class"), str):
        raise ValueError(f"{file} is not a supernet weights file: its space_spec is {info.space_spec!r}")
    return info


def load_weights(info: SupernetInfo, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """The tensors of the file ``info`` describes, once its bytes hash to ``info.sha256``
    (:func:`checked_bytes`)."""
    return {k: v.to(device) for k, v in load_tensors(checked_bytes(info)).items()}


def checked_bytes(info: SupernetInfo) -> bytes:
    """The bytes of the file ``info`` describes; :class:`nas.core.types.SupernetChanged` where they no longer hash
    to ``info.sha256`` (its training was resumed, or another supernet written there), a ValueError where the
    file cannot be read."""
    try:
        data = info.path.read_bytes()
    except OSError as e:
        raise ValueError(f"cannot read {info.path}: {e.strerror or e}") from None
    now = hashlib.sha256(data).hexdigest()
    if now != info.sha256:
        raise SupernetChanged(f"{info.path} changed since this search read it (sha256 {info.sha256[:12]}..., now "
                              f"{now[:12]}...)")
    return data


def check_fits(info: SupernetInfo, space: Any, task: Task) -> None:
    """A one-line ValueError unless the supernet in ``info`` is ``space``'s for ``task``: same class, same tensor
    names and shapes (a supernet of another space, or of the same space with other arguments, is refused)."""
    where = info.path.parent
    spec = space.spec()
    if spec["class"] != info.space_spec["class"]:
        raise ValueError(f"supernet {str(where)!r} is of space {info.space_spec['class']!r}, not "
                         f"{spec['class']!r}")
    if task != info.task:
        raise ValueError(f"supernet {str(where)!r} was trained for {info.task}, this data is {task}")
    with torch.device("meta"):  # shapes only: nothing allocated
        want = {k: tuple(v.shape) for k, v in space.supernet(task).state_dict().items()}
    if want != info.shapes:
        diff = sorted(set(want.items()) ^ set(info.shapes.items()))[0][0]
        raise ValueError(f"supernet {str(where)!r} was trained for space {info.space_spec}, not {spec} "
                         f"(tensor {diff!r} differs)")


__all__ = ["WEIGHTS", "SupernetInfo", "check_fits", "checked_bytes", "load_weights", "read_info", "weights_bytes"]
