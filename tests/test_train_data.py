"""Image datasets from disk: CIFAR python batches (read without executing code) and image folders; their
errors; uint8 datasets trained end to end on real Ray actors."""

from __future__ import annotations

import os
import pickle
import shutil

import numpy as np
import pytest
from PIL import Image

import nas
from nas.cli import main
from nas.train.data import Dataset, load_dataset
from nas.train.datasets import write_cifar
from nas.train.settings import TrainSettings
from nas.train.synthetic import synthetic_images


def cifar_dir(tmp_path, kind="cifar10", n=60, n_test=20, classes=10):
    x, y = synthetic_images(n, classes=classes, seed=1)
    xt, yt = synthetic_images(n_test, classes=classes, seed=2)
    root = tmp_path / kind
    write_cifar(root, kind, x, y.tolist(), xt, yt.tolist(), classes=[f"c{i}" for i in range(classes)])
    return root, x, y, xt, yt


def image_folder(tmp_path, per_class=8, classes=("cat", "dog", "fox"), size=20):
    from PIL import Image

    root = tmp_path / "images"
    x, y = synthetic_images(per_class * len(classes), classes=len(classes), size=size, seed=3)
    for i, (img, label) in enumerate(zip(x, y)):
        folder = root / classes[label]
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(img.transpose(1, 2, 0)).save(folder / f"{i:03d}.png")
    return root


def test_cifar10_batches_are_read_as_uint8_with_a_seeded_hold_out(tmp_path):
    root, x, y, xt, yt = cifar_dir(tmp_path)
    ds = load_dataset(f"cifar10:{root}?val=12", seed=5)
    assert ds.x_train.dtype == np.uint8 and ds.x_train.shape == (48, 3, 32, 32) and ds.x_val.shape == (12, 3, 32, 32)
    assert np.array_equal(ds.x_test, xt) and np.array_equal(ds.y_test, yt)
    # the hold-out is a partition of the training images, the same for the same seed, other for another
    both = np.concatenate([ds.x_train, ds.x_val]).reshape(60, -1)
    assert sorted(map(bytes, both)) == sorted(map(bytes, x.reshape(60, -1)))
    assert np.array_equal(load_dataset(f"cifar10:{root}?val=12", seed=5).y_val, ds.y_val)
    assert not np.array_equal(load_dataset(f"cifar10:{root}?val=12", seed=6).x_val, ds.x_val)
    assert ds.task.input_shape == (3, 32, 32) and ds.task.num_classes == 10


def test_the_extracted_archive_folder_and_cifar100(tmp_path):
    root, *_ = cifar_dir(tmp_path / "outer", kind="cifar100", classes=100, n=120)
    root.rename(tmp_path / "outer" / "cifar-100-python")
    ds = load_dataset(f"cifar100:{tmp_path / 'outer'}", seed=0)
    assert len(ds.x_train) + len(ds.x_val) == 120 and ds.task.num_classes == 100


def test_python2_style_bytes_keys_are_read(tmp_path):
    root, *_ = cifar_dir(tmp_path)
    path = root / "data_batch_1"
    with open(path, "rb") as f:
        d = pickle.load(f)
    with open(path, "wb") as f:
        pickle.dump({k.encode(): v for k, v in d.items()}, f, protocol=2)
    assert len(load_dataset(f"cifar10:{root}").x_train) == 54


class Boom:
    def __reduce__(self):
        return (os.system, ("echo code ran",))


def test_a_batch_that_would_run_code_is_refused_naming_the_file(tmp_path, capsys):
    root, *_ = cifar_dir(tmp_path)
    with open(root / "data_batch_3", "wb") as f:
        pickle.dump({"data": Boom(), "labels": []}, f, protocol=2)
    with pytest.raises(ValueError, match=r"data_batch_3: not a CIFAR python batch file .*refused to load "
                                         r"(os|posix).system") as e:
        load_dataset(f"cifar10:{root}")
    assert "\n" not in str(e.value) and "code ran" not in capsys.readouterr().out


@pytest.mark.parametrize("missing", ["data_batch_4", "test_batch", "batches.meta"])
def test_a_missing_cifar_file_is_named(tmp_path, missing):
    root, *_ = cifar_dir(tmp_path)
    (root / missing).unlink()
    with pytest.raises(ValueError, match=f"has no file '{missing}'; expected data_batch_1, .*cifar-10-python"):
        load_dataset(f"cifar10:{root}")


@pytest.mark.parametrize("missing", ["train", "test", "meta"])
def test_a_missing_cifar100_file_is_named(tmp_path, missing):
    root, *_ = cifar_dir(tmp_path, kind="cifar100", classes=100, n=120)
    (root / missing).unlink()
    with pytest.raises(ValueError, match=f"has no file '{missing}'; expected train, test, meta .*cifar-100-python"):
        load_dataset(f"cifar100:{root}")


@pytest.mark.parametrize("kind", ["cifar10", "cifar100"])
def test_a_missing_cifar_directory_says_where_to_put_it_and_nothing_is_downloaded(tmp_path, kind):
    with pytest.raises(ValueError, match=f"{kind} directory '.*absent' does not exist; nothing is downloaded: get "
                                         f"{kind.replace('cifar', 'cifar-')}-python.tar.gz from .* extract it there"):
        load_dataset(f"{kind}:{tmp_path / 'absent'}")


@pytest.mark.parametrize("batch, message", [
    ({"data": np.zeros((3, 100), np.uint8), "labels": [0, 1, 2]},
     r"data_batch_2: 'data' must be a uint8 array of shape \(n, 3072\), got uint8 \(3, 100\)"),
    ({"pixels": np.zeros((3, 3072), np.uint8), "labels": [0, 1, 2]},
     r"data_batch_2: a cifar10 batch needs keys 'data' and 'labels', has \['labels', 'pixels'\]"),
    ({"data": np.zeros((3, 3072), np.uint8), "labels": [0, 1]},
     r"data_batch_2: 'labels' must hold 3 integer labels, got shape \(2,\)"),
])
def test_a_cifar_batch_of_the_wrong_layout_is_named_in_one_line(tmp_path, batch, message):
    root, *_ = cifar_dir(tmp_path)
    with open(root / "data_batch_2", "wb") as f:
        pickle.dump(batch, f, protocol=2)
    with pytest.raises(ValueError, match=message) as e:
        load_dataset(f"cifar10:{root}")
    assert "\n" not in str(e.value)


def test_image_folder_resizes_and_labels_by_sorted_folder(tmp_path):
    root = image_folder(tmp_path)
    (root / "dog" / "notes.txt").write_text("not an image, skipped as torchvision's ImageFolder does")
    ds = load_dataset(f"imagefolder:{root}?size=16&val=0.25", seed=0)
    assert ds.x_train.dtype == np.uint8 and ds.x_train.shape == (18, 3, 16, 16) and len(ds.x_val) == 6
    assert ds.task.num_classes == 3 and ds.x_test is None


@pytest.mark.parametrize("damage, message", [
    (lambda r: [shutil.rmtree(r / c) for c in ("dog", "fox")], "has one class folder \\('cat'\\); expected at least 2"),
    (lambda r: [p.unlink() for p in (r / "fox").glob("*")], r"class folder '.*images/fox' holds no images"),
    (lambda r: (r / "dog" / "007.png").write_bytes(b"not a png"), r"image '.*dog/\d+.png' cannot be read"),
    (lambda r: (r / "dog" / "007.png").write_bytes((r / "dog" / "007.png").read_bytes()[:-40]),
     r"image '.*dog/007.png' cannot be read \(OSError: image file is truncated"),
    (lambda r: Image.new("1", (14_000, 14_000)).save(r / "dog" / "007.png"),  # 196 Mpixels in 24 KB
     r"image '.*dog/007.png' cannot be read \(DecompressionBombError: Image size \(196000000 pixels\) exceeds"),
    (lambda r: [p.rename(r / p.name) for p in r.glob("*/*")] and [d.rmdir() for d in r.iterdir() if d.is_dir()],
     r"has no class sub-folders \(it holds images such as '\d+.png' directly\)"),
])
def test_bad_image_folders_fail_with_one_line_naming_the_path(tmp_path, damage, message):
    root = image_folder(tmp_path)
    if not (root / "dog" / "007.png").exists():
        (root / "dog" / "007.png").write_bytes((next((root / "dog").glob("*.png"))).read_bytes())
    damage(root)
    with pytest.raises(ValueError, match=message) as e:
        load_dataset(f"imagefolder:{root}")
    assert "\n" not in str(e.value)


def test_a_class_folder_the_hold_out_takes_whole_is_named(tmp_path):
    """(its one image held out for validation: "y_val holds label 2 (index 1)", an array the user never gave)"""
    root = image_folder(tmp_path)
    for extra in sorted((root / "fox").glob("*.png"))[1:]:
        extra.unlink()
    n = sum(1 for _ in root.glob("*/*.png"))
    val = list(np.random.default_rng(0).permutation(n)).index(n - 1) + 1  # seed 0's hold-out of this size takes it
    with pytest.raises(ValueError, match=rf"^dataset 'imagefolder:.*images': class 'fox' has 1 example\(s\), all held "
                                         rf"out for validation \(val {val}.0, seed 0\): no model learns it"):
        load_dataset(f"imagefolder:{root}?val={val}")


@pytest.mark.parametrize("spec, message", [
    ("imagefolder:{d}/nothing", "does not exist; put one sub-folder per class there"),
    ("imagefolder:{d}/images?size=0", "image size must be a positive integer, got 0"),
    ("imagefolder:{d}/images?size=-3", "image size must be a positive integer, got -3"),
    ("imagefolder:{d}/images?width=3", "dataset option 'width=3' .* KEY one of val, size"),
    ("imagefolder:{d}/images?val=1.5", r"val=1.5 must be a fraction in \(0, 1\) or a number of images"),
    ("cifar10:{d}/empty", "has no file 'data_batch_1'"),
    ("imagefolder:{d}/empty", "has no class sub-folders; expected one sub-folder per class"),
    ("mnist:{d}", "unknown dataset"),
    # (inf and 1e400 were an OverflowError traceback; nan "cannot convert float NaN to integer")
    ("imagefolder:{d}/images?val=inf", "dataset option val must be a finite number, got 'inf'"),
    ("imagefolder:{d}/images?val=1e400", "dataset option val must be a finite number, got '1e400'"),
    ("imagefolder:{d}/images?val=nan", "dataset option val must be a finite number, got 'nan'"),
    ("imagefolder:{d}/images?size=x", "dataset option size must be a number, got 'x'"),
    ("imagefolder:{d}/images?val=0.2&val=0.3", "dataset option 'val' is given twice"),
    ("cifar10:~nosuchuser/x", "names the home of a user this machine does not have"),  # (a RuntimeError)
])
def test_bad_specs(tmp_path, spec, message):
    image_folder(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=message):
        load_dataset(spec.format(d=tmp_path))


def test_npz_with_uint8_images_channels_last(tmp_path):
    x, y = synthetic_images(30, classes=3, size=8, seed=0)
    np.savez(tmp_path / "imgs.npz", x=x.transpose(0, 2, 3, 1), y=y, x_test=x[:5].transpose(0, 2, 3, 1), y_test=y[:5])
    ds = load_dataset(str(tmp_path / "imgs.npz"))
    assert ds.x_train.dtype == np.uint8 and ds.x_train.shape[1:] == (3, 8, 8) and ds.x_test.shape == (5, 3, 8, 8)
    with pytest.raises(ValueError, match="x_val is float32 but x_train is uint8"):
        Dataset("mixed", x, y, x.astype(np.float32), y)
    # (float images stored channels-last were read as 8 channels of 8x3 pixels: flipped across colours, no word said)
    scaled = x.astype(np.float32) / 255
    np.savez(tmp_path / "floats.npz", x=scaled.transpose(0, 2, 3, 1), y=y)
    ds = load_dataset(str(tmp_path / "floats.npz"))
    assert ds.x_train.dtype == np.float32 and ds.task.input_shape == (3, 8, 8)
    originals = {row.tobytes() for row in scaled}
    assert all(row.tobytes() in originals for row in ds.x_train)  # (each example as it was, channels first)


@pytest.mark.ray
@pytest.mark.parametrize("kind", ["cifar10", "imagefolder"])
def test_image_datasets_train_end_to_end_on_ray_actors(ray_local, tmp_path, kind):
    spec = f"cifar10:{cifar_dir(tmp_path)[0]}" if kind == "cifar10" else f"imagefolder:{image_folder(tmp_path)}"
    settings = TrainSettings(epochs=1, batch_size=16, crop_padding=4, flip=True, cutout=8, optimizer="sgd",
                             nesterov=True, lr=0.05, schedule="cosine", label_smoothing=0.1, grad_clip=5.0)
    df = nas.search("macro", "random", budget=2, workers=2, data=spec, executor="ray", seed=0,
                    settings=settings, run_dir=tmp_path / "run")
    assert len(df) == 2 and (df.state == "COMPLETE").all(), df.error.tolist()
    assert all(m["data_path"] == "device" and m["hparams"]["crop_padding"] == 4 for m in df.metrics)
    assert set(df.worker) == {"nas-trainer-0", "nas-trainer-1"}


def test_evaluate_test_reports_the_chosen_architecture_on_the_test_split(tmp_path, capsys):
    root, *_ = cifar_dir(tmp_path)
    run_dir = str(tmp_path / "run")
    assert main(["search", "--space", "macro", "--executor", "inprocess", "--budget", "2", "--epochs", "1",
                 "--dataset", f"cifar10:{root}", "--recipe", "nb201", "--batch-size", "16", "--run-dir", run_dir,
                 "--quiet", "--device", "cpu"]) == 0
    capsys.readouterr()
    assert main(["best", run_dir, "--evaluate-test"]) == 0
    out = capsys.readouterr().out
    assert "on 20 test images, for this architecture only" in out
    assert main(["best", run_dir]) == 0 and "test accuracy" not in capsys.readouterr().out
