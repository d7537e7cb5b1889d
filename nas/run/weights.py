"""Weights in a run directory (``best.pt``, ``checkpoints/<id>.pt``): every read goes through here, and every read
is checked to be data (``torch.load(weights_only=True)``: tensors and plain values, never code) before anything
uses, copies or keeps it. A crafted pickle is refused with one line naming the file, whoever asked for it: ``nas
best --export-weights``, ``--pareto --export``, a warm start, a resume repairing best.pt.

>>> import io, json, tempfile, torch
>>> run = Path(tempfile.mkdtemp())
>>> buf = io.BytesIO(); torch.save({"model": {"w": torch.ones(1)}}, buf); data = buf.getvalue()
>>> _ = (run / "best.pt").write_bytes(data)
>>> _ = (run / "best.json").write_text(json.dumps({"trial_id": 3, "weights": "best.pt",
...                                                 "weights_sha256": hashlib.sha256(data).hexdigest()}))
>>> best_checkpoint(run, 3) == data
True
>>> import pickle; _ = (run / "best.pt").write_bytes(pickle.dumps(Path("x")))
>>> _ = (run / "best.json").write_text(json.dumps({"trial_id": 3, "weights": "best.pt",
...     "weights_sha256": hashlib.sha256((run / "best.pt").read_bytes()).hexdigest()}))
>>> best_checkpoint(run, 3)
Traceback (most recent call last):
...
ValueError: .../best.pt is not a plain checkpoint (torch.load(weights_only=True) refused it: UnpicklingError)
"""

from __future__ import annotations

import hashlib
import io
import warnings
from pathlib import Path
from typing import Any

from nas.run.files import load_json, os_error_text, read_file

BEST_JSON, BEST_PT, CHECKPOINTS = "best.json", "best.pt", "checkpoints"


def check_checkpoint(data: bytes, where: object) -> bytes:
    """``data`` when it loads with ``torch.load(weights_only=True)`` (tensors and plain data, no code)."""
    import torch

    try:
        with warnings.catch_warnings():  # (torch warns of a pickle protocol it then refuses: our one line says it)
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as e:  # any failure: not a plain checkpoint, refuse it
        raise ValueError(f"{where} is not a plain checkpoint (torch.load(weights_only=True) refused it: "
                         f"{type(e).__name__})") from None
    return data


def read_checkpoint(path: Path) -> bytes:
    """The bytes of the weights file ``path``, checked to be data (a ValueError naming it otherwise)."""
    try:
        data = read_file(path)
    except OSError as e:
        raise ValueError(f"cannot read {str(path)!r}: {os_error_text(e)}") from None
    return check_checkpoint(data, path)


def best_checkpoint(path: Path, trial_id: int) -> bytes:
    """The bytes of ``best.pt`` of the run directory ``path``, once best.json says it holds ``trial_id``'s weights,
    their hash agrees and they load as data; else a ValueError saying why (e.g. a crash between the two writes:
    a resume repairs it)."""
    pt = best_weights_path(path, trial_id)
    return read_checkpoint(pt)


def best_weights(path: Path, trial_id: int) -> Path:
    """``best.pt`` of ``path`` (see :func:`best_checkpoint`), checked as it does; the file's path."""
    best_checkpoint(path, trial_id)
    return path / BEST_PT


def best_weights_path(path: Path, trial_id: int) -> Path:
    best = read_json(path / BEST_JSON)
    if best is None or best.get("weights") is None or not (path / BEST_PT).is_file():
        raise ValueError(f"run {str(path)!r} saved no weights for its best trial (best.pt is missing)")
    if best.get("trial_id") != trial_id or not weights_match(path, best):
        raise ValueError(f"best.pt of {str(path)!r} does not hold trial {trial_id}'s weights (the run stopped "
                         f"between writing best.pt and best.json); resume the run to repair the pair")
    return path / BEST_PT


def kept_or_best(path: Path, trial_id: int) -> bytes | None:
    """The weights a run kept for ``trial_id``: ``checkpoints/<id>.pt``, or ``best.pt`` when best.json names that
    trial (and the hash agrees); None when it kept neither. Checked to be data (a ValueError otherwise)."""
    kept = path / CHECKPOINTS / f"{int(trial_id)}.pt"
    if kept.is_file():
        return read_checkpoint(kept)
    try:
        pt = best_weights_path(path, int(trial_id))
    except ValueError:  # no best.pt, or it holds another trial's weights
        return None
    return read_checkpoint(pt)


def weights_match(path: Path, best: dict[str, Any]) -> bool:
    """Whether ``best.pt`` is what best.json (``best``) says: absent when it names no weights, else of its hash."""
    pt = path / BEST_PT
    if best.get("weights") is None:
        return not pt.exists()
    try:
        return hashlib.sha256(read_file(pt)).hexdigest() == best.get("weights_sha256")
    except OSError:
        return False


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from ``path``, or None where there is none (missing, unreadable, not JSON, not an object)."""
    try:
        value = load_json(read_file(path))
    except (OSError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


__all__ = ["BEST_JSON", "BEST_PT", "CHECKPOINTS", "best_checkpoint", "best_weights", "check_checkpoint",
           "kept_or_best", "read_checkpoint", "read_json", "weights_match"]
