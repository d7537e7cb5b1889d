"""nas.run.snapshot: data in, the same data out; a torn or crafted file is a ValueError, never code run."""

from __future__ import annotations

import hashlib
import io
import json
import math
import pickle

import numpy as np
import pytest
import torch
from safetensors.torch import save as save_tensors

from nas.run import snapshot
from nas.run.snapshot import read_snapshot, write_snapshot


class WritesMarker:
    """Loading this pickle creates a file: proof that loading ran code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_what_json_cannot_hold_comes_back_as_its_own_type(tmp_path):
    payload = {
        "rng": np.random.default_rng(5).bit_generator.state,  # 128-bit ints
        "big": -(2**70), "edge": 2**53, "nan": math.nan, "inf": [math.inf, -math.inf],
        "int_keys": {0: "a", 7: {1: 2}}, "mixed_keys": {1: "x", "1": "y", (2, 3): None},
        "tag_lookalike": {"__nas__": "int", "value": "5"},
        "tuple": (1, (2, "x")), "bytes": b"\x00\x80pickle",
        "np_scalars": [np.float32(1.25), np.int64(-3), np.bool_(True), np.uint8(255)],
        "arrays": [np.arange(6, dtype=np.int16).reshape(2, 3), np.array([1.0, np.nan], dtype=">f8"),
                   np.zeros((0, 4), dtype=np.float32), np.array(3.5)],
        "tensors": {"w": torch.randn(3, 2, requires_grad=True), "h": torch.ones(2, dtype=torch.bfloat16),
                    "strided": torch.arange(10)[::3], "scalar": torch.tensor(2, dtype=torch.int64)},
    }
    n = write_snapshot(tmp_path / "s.json", payload)
    back = read_snapshot(tmp_path / "s.json")
    assert n == sum(p.stat().st_size for p in tmp_path.iterdir())
    assert back["rng"] == payload["rng"] and back["big"] == -(2**70) and back["edge"] == 2**53
    assert math.isnan(back["nan"]) and back["inf"] == [math.inf, -math.inf]
    assert back["int_keys"] == {0: "a", 7: {1: 2}} and back["mixed_keys"] == payload["mixed_keys"]
    assert back["tag_lookalike"] == payload["tag_lookalike"]
    assert back["tuple"] == (1, (2, "x")) and back["bytes"] == payload["bytes"]
    for a, b in zip(payload["np_scalars"], back["np_scalars"]):
        assert type(a) is type(b) and a == b
    for a, b in zip(payload["arrays"], back["arrays"]):
        assert type(b) is np.ndarray and a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    for k, a in payload["tensors"].items():
        b = back["tensors"][k]
        assert type(b) is torch.Tensor and a.dtype == b.dtype and torch.equal(a.detach(), b)


def test_a_payload_without_arrays_is_one_json_file(tmp_path):
    write_snapshot(tmp_path / "s.json", {"a": [1, 2]})
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"]
    assert json.loads((tmp_path / "s.json").read_text())["tensors"] is None


@pytest.mark.parametrize("value, allowed", [(object(), "a object cannot"), ({1.5j: 1}, "dict key"),
                                            (np.array(["a"]), "dtype <U1"), (lambda: 0, "a function")])
def test_values_that_are_not_data_are_refused_by_name(tmp_path, value, allowed):
    with pytest.raises(ValueError, match=allowed):
        write_snapshot(tmp_path / "s.json", {"x": [value]})
    assert not (tmp_path / "s.json").exists()


def test_a_crash_mid_write_leaves_the_previous_pair_whole(tmp_path, monkeypatch):
    """The tensor file is written first under a new name, the JSON last; a crash before the JSON is
    replaced leaves the old JSON naming the old tensor file, still there and intact."""
    path = tmp_path / "s.json"
    write_snapshot(path, {"w": torch.zeros(4), "gen": 1})
    real, crashed = snapshot.atomic_write, []

    def crash_on_json(p, data):
        if p == path:
            crashed.append(p)
            raise OSError("simulated crash before the JSON was replaced")
        real(p, data)

    monkeypatch.setattr(snapshot, "atomic_write", crash_on_json)
    with pytest.raises(OSError, match="simulated crash"):
        write_snapshot(path, {"w": torch.ones(4), "gen": 2})
    assert crashed == [path]
    back = read_snapshot(path)
    assert back["gen"] == 1 and torch.equal(back["w"], torch.zeros(4))
    monkeypatch.undo()
    write_snapshot(path, {"w": torch.ones(4), "gen": 3})  # the next snapshot removes the orphan
    assert read_snapshot(path)["gen"] == 3 and len(list(tmp_path.glob("*.safetensors"))) == 1


def write(tmp_path, doc):
    (tmp_path / "s.json").write_text(json.dumps(doc))
    return tmp_path / "s.json"


def good_doc(tmp_path):
    write_snapshot(tmp_path / "s.json", {"w": torch.zeros(2)})
    return json.loads((tmp_path / "s.json").read_text())


@pytest.mark.parametrize("breakage, message", [
    (lambda p, d: p.write_bytes(b'{"format": "nas-snap'), "is not a JSON snapshot"),
    (lambda p, d: p.write_bytes(b"\xff\xfe"), "is not a JSON snapshot"),
    (lambda p, d: write(p.parent, [1, 2]), "is not a nas-snapshot file"),
    (lambda p, d: write(p.parent, {**d, "version": 99}), "version 99 is not supported"),
    (lambda p, d: write(p.parent, {**d, "payload": {"x": {"__nas__": "eval", "value": "1"}}}), "unknown tag"),
    (lambda p, d: write(p.parent, {**d, "payload": {"x": {"__nas__": "numpy", "name": "t0", "dtype": "O"}}}),
     "not a numeric dtype"),
    (lambda p, d: write(p.parent, {**d, "tensors": {**d["tensors"], "file": "../x.safetensors"}}), "beside"),
    (lambda p, d: write(p.parent, {**d, "tensors": {**d["tensors"], "sha256": "0" * 64}}), "does not match"),
    (lambda p, d: next(p.parent.glob("*.safetensors")).unlink(), "cannot be read"),
    (lambda p, d: p.unlink(), "cannot read the snapshot"),
])
def test_corrupt_or_foreign_snapshots_are_a_value_error_naming_the_file(tmp_path, breakage, message):
    path = tmp_path / "s.json"
    breakage(path, good_doc(tmp_path))
    with pytest.raises(ValueError, match=message) as e:
        read_snapshot(path)
    assert str(tmp_path) in str(e.value)


@pytest.mark.parametrize("make_blob", [
    lambda m: pickle.dumps(WritesMarker(m)),
    lambda m: _torch_save(WritesMarker(m)),
])
def test_a_crafted_tensor_file_with_a_matching_hash_is_refused_without_running_it(tmp_path, make_blob):
    marker = tmp_path / "marker"
    doc = good_doc(tmp_path)
    blob = make_blob(marker)
    name = "s.json.crafted.safetensors"
    (tmp_path / name).write_bytes(blob)
    write(tmp_path, {**doc, "tensors": {"file": name, "sha256": hashlib.sha256(blob).hexdigest()}})
    with pytest.raises(ValueError, match="is not a safetensors file"):
        read_snapshot(tmp_path / "s.json")
    assert not marker.exists()


def _torch_save(obj):
    buf = io.BytesIO()
    torch.save({"x": obj}, buf)
    return buf.getvalue()


def test_a_valid_safetensors_file_that_lacks_a_named_tensor_is_corrupt(tmp_path):
    doc = good_doc(tmp_path)
    blob = save_tensors({"other": torch.zeros(1)})
    (tmp_path / "s.json.x.safetensors").write_bytes(blob)
    write(tmp_path, {**doc, "tensors": {"file": "s.json.x.safetensors", "sha256": hashlib.sha256(blob).hexdigest()}})
    with pytest.raises(ValueError, match="corrupt snapshot payload"):
        read_snapshot(tmp_path / "s.json")
