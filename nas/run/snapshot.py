"""Strategy snapshots as data (JSON), written atomically. (Placeholder until the ``state`` branch's
safetensors-backed version lands; the two functions keep their signatures.)

Arrays and tensors are stored as tagged lists, bytes as base64, so nothing read back executes code.

>>> import tempfile
>>> p = Path(tempfile.mkdtemp()) / "snapshot.json"
>>> n = write_snapshot(p, {"told": 3, "state": {"a": [1, 2]}})
>>> read_snapshot(p)["state"]
{'a': [1, 2]}
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np

from nas.run.files import atomic_write


def _encode(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return {"__tensor__": value.detach().cpu().tolist(), "dtype": str(value.dtype).removeprefix("torch.")}
    if isinstance(value, np.ndarray):
        return {"__ndarray__": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bytes):
        return {"__bytes__": base64.b64encode(value).decode()}
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()} | (
            {"__intkeys__": True} if value and all(isinstance(k, int) for k in value) else {})
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "__tensor__" in value:
        import torch

        return torch.tensor(value["__tensor__"], dtype=getattr(torch, value["dtype"]))
    if "__ndarray__" in value:
        return np.asarray(value["__ndarray__"], dtype=np.dtype(value["dtype"]))
    if "__bytes__" in value:
        return base64.b64decode(value["__bytes__"])
    intkeys = value.pop("__intkeys__", False)
    return {(int(k) if intkeys else k): _decode(v) for k, v in value.items()}


def write_snapshot(path: Path, payload: dict[str, Any]) -> int:
    """Replace ``path`` atomically by ``payload`` as JSON; the bytes written."""
    return atomic_write(path, json.dumps(_encode(payload), separators=(",", ":")).encode())


def read_snapshot(path: Path) -> dict[str, Any]:
    """The payload at ``path``; a ValueError naming the file when it is not a whole snapshot."""
    try:
        value = json.loads(path.read_bytes())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} is corrupt or not a strategy snapshot: {type(e).__name__}: {e}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path} is corrupt or not a strategy snapshot: a {type(value).__name__}, not an object")
    return _decode(value)  # type: ignore[no-any-return]
