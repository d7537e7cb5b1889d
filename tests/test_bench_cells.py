"""``nas bench cells`` (NAS-Bench-201 cells trained with the nb201 recipe against the table) and the augmented
path of ``nas bench train``: real training, tiny sizes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from nas.cli import main
from nas.engine.tabular.nb201_table import load_table
from nas_benchmarks.nb201_cells import pick_cells


def test_cells_are_spread_over_the_accuracy_range():
    rows = pick_cells(6)
    acc = load_table().valid200["cifar10"][rows]
    assert len(rows) == 6 and list(acc) == sorted(acc) and acc[-1] == load_table().best("cifar10")[1]
    assert acc[0] < 75 < 88 < acc[-1]


def test_bench_cells_prints_the_rank_correlation(tmp_path, capsys, keep_threads):
    out_json = tmp_path / "cells.json"
    code = main(["bench", "cells", "--cells", "3", "--epochs", "1", "--samples", "120", "--batch-size", "32",
                 "--seeds", "2", "--threads", "1", "--device", "cpu", "--json", str(out_json)])
    out = capsys.readouterr().out
    assert code == 0 and "recipe nb201 for 1 epochs" in out
    assert "Spearman rank correlation" in out
    figures = json.loads(out_json.read_text())
    assert len(figures["cells"]) == 3 and all(0 <= c["ours"] <= 1 for c in figures["cells"])
    assert figures["steps"] == 3 and "3 SGD steps per cell" in out  # 90 training images, batch 32, 1 epoch
    assert all(len(c["ours_seeds"]) == 2 and c["ours"] == sum(c["ours_seeds"]) / 2 for c in figures["cells"])
    assert "verdict" in figures  # a reason the figure means nothing (chance, saturated, within noise), or None


@pytest.mark.parametrize("argv, message", [
    (["--cells", "2"], "--cells must be >= 3, got 2"),
    (["--dataset", "digits"], "--dataset must be synthetic, cifar10:DIR or cifar100:DIR"),
    (["--recipe", "fast"], "unknown recipe 'fast'; known: nb201, nb201-12"),
    (["--dataset", "cifar10:/no/such/dir"], "cifar10 directory '/no/such/dir' does not exist; nothing is downloaded"),
])
def test_bench_cells_bad_input(argv, message, capsys):
    assert main(["bench", "cells", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_bench_train_augmented_path(tmp_path, capsys, keep_threads):
    # 75 training images in batches of 37: the last batch of one is dropped, in both loops
    code = main(["bench", "train", "--space", "macro", "--dataset", "images-32", "--samples", "100", "--augment",
                 "--batch-size", "37", "--epochs", "2", "--repeats", "1", "--threads", "1", "--device", "cpu", "--json",
                 str(tmp_path / "t.json")])
    out = capsys.readouterr().out
    assert code == 0 and "augmented: crop pad 4, flip, cutout 8 in both loops" in out
    row = json.loads((tmp_path / "t.json").read_text())["compare"][0]
    assert row["augment"] == {"crop_padding": 4, "flip": True, "cutout": 8} and row["bare"] > 0 and row["ours"] > 0
    # like-for-like: the same seed, initial weights, batches and augmentation draws end in the same weights
    assert row["max_weight_diff"] == 0.0 and row["bare_acc"] == row["ours_acc"]
    assert all(row["phases"][side][f] > 0 for side in ("bare", "ours") for f in ("start_wall", "loop_wall"))
    assert "start-up ms bare/ours" in out and row["cpu_time_ratio"] > 0
    np.savez(tmp_path / "tab.npz", x=np.zeros((30, 4)), y=np.arange(30) % 2)
    assert main(["bench", "train", "--dataset", str(tmp_path / "tab.npz"), "--augment"]) == 2
    assert "--augment needs image inputs" in capsys.readouterr().err
