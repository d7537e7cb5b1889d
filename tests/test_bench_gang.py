"""``nas bench gang`` on the session's 2-CPU Ray cluster, at its smallest: both tables printed, the figures written,
bad input one line. (Figures are printed, never asserted.)"""

from __future__ import annotations

import json

import pytest

from nas.cli import main


@pytest.mark.ray
@pytest.mark.slow
def test_both_tables_and_their_figures(ray_local, tmp_path, capsys):
    out_file = tmp_path / "gang.json"
    assert main(["bench", "gang", "--ranks", "1", "--dataset", "digits", "--space", "toy",
                 "--arch", "d0=3,d1=1,d2=4,d3=2,d4=3", "--epochs", "1", "--batch-size", "64", "--repeats", "1",
                 "--trials", "2", "--ray-train-trials", "1", "--json", str(out_file)]) == 0
    out = capsys.readouterr().out
    assert "trainer actor" in out and "gang of 1" in out and "Ray Train TorchTrainer x 2" in out
    figures = json.loads(out_file.read_text())
    scaling, fixed = figures["scaling"], figures["fixed"]
    assert [r["ranks"] for r in scaling] == [0, 1] and all(0 <= r["val_acc"] <= 1 for r in scaling)
    assert all(r["samples_per_second"] > 0 and r["per_trial_fixed"] >= 0 for r in scaling)
    assert [len(r["wall"]) for r in fixed] == [2, 1]
    assert all(wall >= train for r in fixed for wall, train in zip(r["wall"], r["train"]))


@pytest.mark.parametrize(("argv", "message"), [
    (["--ranks", "1,x"], "--ranks must be comma-separated integers, got '1,x'"),
    (["--ranks", "0"], "--ranks must be >= 1, got 0"),
    (["--ranks", "3", "--batch-size", "64"], "--batch-size 64 must split evenly over 3 ranks"),
    (["--repeats", "0"], "--repeats must be >= 1, got 0"),
])
def test_bad_input_is_one_line(capsys, argv, message):
    assert main(["bench", "gang", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
