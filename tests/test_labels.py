"""Labels are class indices: every label array (train, val, test) is checked against the class count the training
labels give, in Python and from a .npz on the CLI; a bad one is one line naming the array, the value and its index,
before any trial runs. Non-integer labels are refused (never truncated); a class count past sanity warns."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest

import nas
from nas.cli import main
from nas.train.data import Dataset

X = np.zeros((40, 1, 4, 4), np.float32)
Y = np.arange(40) % 4


@pytest.mark.parametrize(("kw", "message"), [
    ({"y_val": np.array([0, 1, -1, 2])}, "y_val holds label -1 (index 2); labels are class indices >= 0"),
    ({"y_val": np.array([0, 1, 7, 2])}, "y_val holds label 7 (index 2), but the training labels give 4 classes (0..3)"),
    ({"y_test": np.array([0, 4, 1, 2])}, "y_test holds label 4 (index 1), but the training labels give 4 classes"),
    # (named y_train, at an index of the split, where the user gave y and no y_val)
    ({"y": np.where(np.arange(40) == 5, -3, Y)}, "y holds label -3 (index 5); labels are class indices >= 0"),
    ({"y": np.where(np.arange(40) == 5, -3, Y), "x_val": None, "y_val": None}, "y holds label -3 (index 5)"),
    ({"y": Y + 0.5}, "y holds the non-integer label 0.5 (index 0); labels are class indices"),
    ({"y_val": np.array([0.0, np.nan, 1.0, 2.0])}, "y_val holds the non-integer label nan (index 1)"),
    ({"y_val": np.array(["a", "b", "c", "d"])}, "y_val must hold integer class indices, got dtype <U1"),
    ({"y": Y > 1}, "y holds booleans; labels are integer class indices"),
    ({"y_test": np.array([True, False, True, True])}, "y_test holds booleans"),
    ({"y": np.where(np.arange(40) == 3, 2**63 + 5, Y).astype(np.uint64)},
     "y holds label 9223372036854775813 (index 3)"),
    # (warned of, then every trial failed in torch: a head of 2**63 outputs)
    ({"y": np.where(np.arange(40) == 3, 2**63 - 1, Y)}, "y_train holds label 9223372036854775807 (index 3): "
                                                      "9,223,372,036,854,775,808 classes, past the 10,000,000"),
    ({"y": np.zeros(40, int), "y_val": np.zeros(4, int)}, "y_train holds one class (0) only: a classifier needs"),
])
def test_a_bad_label_is_one_line_naming_the_array_and_value(kw, message):
    arrays = {"x": X, "y": Y, "x_val": X[:4], "y_val": Y[:4], **kw}
    if "y_test" in kw:
        arrays["x_test"] = X[:4]
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        Dataset.from_arrays(arrays.pop("x"), arrays.pop("y"), name="d", **arrays)


def test_a_dataset_made_directly_is_checked_as_from_arrays_checks_it():
    """Only from_arrays checked the inputs: nas.Dataset(...) of NaN inputs failed every trial as NAN, of lists
    with an AttributeError on 'dtype'."""
    with pytest.raises(ValueError, match=re.escape("dataset 'd': x_val holds a value that is not a finite float32")):
        Dataset("d", X, Y, np.full((4, 1, 4, 4), np.nan, np.float32), Y[:4])
    with pytest.raises(TypeError, match=re.escape("dataset 'd': x_train must be a numpy array, got list")):
        Dataset("d", X.tolist(), Y, X[:4], Y[:4])
    with pytest.raises(TypeError, match=re.escape("dataset 'd': y_val must be a numpy array, got list")):
        Dataset("d", X, Y, X[:4], [0, 1, 2, 3])


@pytest.mark.parametrize(("kw", "message"), [
    ({"val_fraction": "0.2"}, "val_fraction must be a number in (0, 1), got '0.2'"),
    ({"val_fraction": True}, "val_fraction must be a number in (0, 1), got True"),
    ({"seed": -1}, "seed must be an integer from 0 to 2**63 - 1, got -1"),
    ({"seed": "a"}, "seed must be an integer from 0 to 2**63 - 1, got 'a'"),
])
def test_from_arrays_names_a_bad_argument(kw, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        Dataset.from_arrays(X, Y, name="d", **kw)


def test_an_npz_array_of_another_name_is_refused_not_ignored(tmp_path):
    """x_valid/y_valid were never read: a random hold-out trained instead, their bad labels never seen."""
    path = tmp_path / "d.npz"
    np.savez(path, x=X, y=Y, x_valid=X[:4], y_valid=Y[:4] + 9)
    with pytest.raises(ValueError, match=re.escape("holds arrays ['x_valid', 'y_valid'] this platform does not read "
                                                   "(did you mean 'x_val' for 'x_valid', 'y_val' for 'y_valid'?); "
                                                   "allowed: x, y, x_val, y_val, x_test, y_test")):
        nas.load_dataset(str(path))


@pytest.mark.parametrize("data", [(X, Y), X, {"x": X, "y": Y}])
def test_arrays_handed_as_data_are_a_type_error_not_a_2kb_dataset_name(data):
    with pytest.raises(TypeError, match=r"data must be a dataset's name or \.npz path, a nas Dataset or None, got "):
        nas.search("toy", "random", data=data, budget=1, executor="inprocess")


def test_whole_float_labels_are_accepted_as_integers():
    ds = Dataset.from_arrays(X, Y.astype(np.float64), name="d")
    assert ds.y_train.dtype == np.int64 and ds.num_classes == 4


def test_a_huge_label_warns_of_the_head_it_builds(caplog):
    with caplog.at_level(logging.WARNING, logger="nas.train.labels"):
        ds = Dataset.from_arrays(X, np.where(np.arange(40) == 0, 10**6, Y), x_val=X[:4], y_val=Y[:4], name="d")
    assert ds.num_classes == 10**6 + 1 and "1000001 classes" in caplog.text and "check the labels" in caplog.text


@pytest.mark.parametrize(("y_val", "message"), [
    (np.array([0, 1, -1, 2]), "y_val holds label -1 (index 2)"),
    (np.array([0, 1, 9, 2]), "y_val holds label 9 (index 2), but the training labels give 4 classes"),
])
def test_the_cli_refuses_bad_labels_before_any_trial(tmp_path, capsys, y_val, message):
    path = tmp_path / "data.npz"
    np.savez(path, x=X, y=Y, x_val=X[:4], y_val=y_val)
    code = main(["search", "--space", "toy", "--executor", "inprocess", "--quiet", "--budget", "2",
                 "--dataset", str(path),
                 "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists()


def test_load_dataset_checks_labels_of_an_npz(tmp_path):
    path = tmp_path / "d.npz"
    np.savez(path, x=X, y=Y, x_test=X[:2], y_test=np.array([0, 12]))
    with pytest.raises(ValueError, match=r"y_test holds label 12 \(index 1\)"):
        nas.load_dataset(str(path))


@pytest.mark.parametrize(("kw", "message"), [
    ({"x": np.where(np.arange(40)[:, None, None, None] == 5, np.nan, X)}, "x holds a value that is not a finite "
                                                                        "float32 (at index (5, 0, 0, 0))"),
    ({"x_val": np.full((4, 1, 4, 4), np.inf)}, "x_val holds a value that is not a finite float32 (at index (0,"),
    ({"x": np.full((40, 1, 4, 4), 1e39)}, "past float32's range"),
    ({"x": X.astype(str)}, "x must hold real numbers, got dtype <U"),
    ({"x": X.astype(complex)}, "x must hold real numbers, got dtype complex128"),
    ({"x": np.array(1.0)}, "x has shape (); it must hold one row of inputs per example"),
    ({"x": X[:, 0, 0, 0]}, "x has shape (40,); it must hold one row of inputs per example"),
    ({"x_val": X[:4, 0, 0, 0]}, "x_val has shape (4,); it must hold one row"),
    ({"x_val": None}, "y_val is given without x_val; give both or neither"),
    # (a model of no inputs trained to the majority class's accuracy, silently)
    ({"x": np.zeros((40, 0))}, "x has shape (40, 0): its examples hold no values"),
    ({"x_val": np.zeros((4, 1, 0, 4), np.float32)}, "x_val has shape (4, 1, 0, 4): its examples hold no values"),
    ({"y_test": None, "x_test": X[:4]}, "x_test is given without y_test"),
])
def test_bad_inputs_are_one_line_naming_the_array(kw, message):
    arrays = {"x": X, "y": Y, "x_val": X[:4], "y_val": Y[:4], **kw}
    with pytest.raises(ValueError, match=re.escape(message)):
        Dataset.from_arrays(arrays.pop("x"), arrays.pop("y"), name="d", **arrays)


@pytest.mark.parametrize("rare", [4, 2])
def test_a_class_the_hold_out_takes_whole_is_one_line_in_the_words_of_y(rare):
    """A class whose only example the seeded validation split holds out: above the training labels' largest (4) it
    was "y_val holds label 4 (index 3)", naming an array the user never gave; below it (2) it trained unseen."""
    y = np.arange(41) % 4
    y[y == rare] = 0
    y[np.random.default_rng(0).permutation(41)[0]] = rare  # (the first of the 10 that seed 0 holds out)
    with pytest.raises(ValueError, match=rf"^dataset 'd': class {rare} has 1 example\(s\), all held out for "
                                         r"validation \(val_fraction 0.25, seed 0\): no model learns it; give it "
                                         r"more examples, or a validation split of your own$"):
        Dataset.from_arrays(np.zeros((41, 2), np.float32), y, name="d")


@pytest.mark.parametrize(("content", "message"), [
    (b"", "is not a .npz archive of arrays (EOFError)"),
    (b"not a zip", "is not a .npz archive of arrays"),
    (b"PK\x03\x04 a zip's magic, then garbage", "is not a .npz archive of arrays (BadZipFile)"),
    ("cut", "is not a .npz archive of arrays (BadZipFile)"),
    ("crc", "array 'x' cannot be read as numbers (BadZipFile)"),
    ("npy", "holds one array (.npy), not a .npz archive"),
    ("objects", "array 'y' cannot be read as numbers (Python objects, which are never unpickled)"),
])
def test_an_unreadable_npz_is_one_line_naming_the_file(tmp_path, content, message):
    path = tmp_path / "d.npz"
    if content == "npy":
        with open(path, "wb") as f:
            np.save(f, X)
    elif content == "objects":
        np.savez(path, x=X, y=np.array([{"label": 1}] * 40, dtype=object))
    elif content in ("cut", "crc"):  # a real archive, cut short or with a byte of x's data changed
        np.savez(path, x=X, y=Y)
        data = bytearray(path.read_bytes())
        if content == "cut":
            del data[len(data) // 2:]
        else:
            data[200] ^= 0xFF
        path.write_bytes(bytes(data))
    else:
        path.write_bytes(content)
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        nas.load_dataset(str(path))
    assert str(path) in str(info.value) and "\n" not in str(info.value)
