"""``nas bench inherit`` (registered by nas.cli.bench): real training of children with and without their
parent's weights, printed side by side."""

from __future__ import annotations

import argparse
import json

import pytest

from nas_benchmarks import weight_inheritance


def run(argv):
    parser = argparse.ArgumentParser()
    weight_inheritance.register(parser.add_subparsers())
    args = parser.parse_args(["inherit", *argv])
    return args.handler(args)


def test_quick_bench_prints_both_sides_for_both_tasks(tmp_path, capsys, keep_threads):
    out_json = tmp_path / "inherit.json"
    assert run(["--quick", "--device", "cpu", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "scratch" in out and "inherited + optimizer" in out and "digits (1,348 train)" in out
    assert "images-32 (150 train)" in out
    figures = json.loads(out_json.read_text())
    digits, images = figures["tasks"]
    for task in (digits, images):
        assert len(task["children"]) == 2 and task["parent_epochs"] == 1
        for child in task["children"]:
            assert 0.8 < child["fraction"] < 1.0  # one edge of every cell is new; the rest is the parent's
            assert all(0.0 <= child[k] <= 1.0 for k in ("before", "scratch", "inherited", "inherited_opt"))
    # before any training, an inherited child is far above chance (0.1): most of its parent survived
    assert all(c["before"] > 0.2 for c in digits["children"]) and digits["parent_acc"] > 0.5


@pytest.mark.parametrize(("argv", "message"), [
    (["--children", "0"], "--children must be >= 1, got 0"),
    (["--samples", "50"], "--samples must be >= 100, got 50"),
    (["--threads", "0"], "--threads must be >= 1, got 0"),
])
def test_bad_input_is_named(argv, message, keep_threads):
    with pytest.raises(ValueError, match=message):
        run(argv)


def test_quick_search_bench_runs_both_sides(tmp_path, capsys, keep_threads):
    from nas_benchmarks import inherit_search

    parser = argparse.ArgumentParser()
    inherit_search.register(parser.add_subparsers())
    out_json, out_png = tmp_path / "search.json", tmp_path / "search.png"
    args = parser.parse_args(["inherit-search", "--quick", "--device", "cpu", "--json", str(out_json),
                              "--plot", str(out_png)])
    assert args.handler(args) == 0
    out = capsys.readouterr().out
    assert "from scratch, 2 epochs" in out and "inherited, 1 epoch(s) per child" in out
    figures = json.loads(out_json.read_text())
    assert out_png.stat().st_size > 0
    for runs in figures["curves"].values():
        (curve,) = runs
        assert len(curve) == 4
        assert all(a[0] < b[0] and a[1] <= b[1] for a, b in zip(curve, curve[1:]))  # time and best only grow
    with pytest.raises(ValueError, match="--sample-size must be <= --population, got 3 > 2"):
        parser_args = parser.parse_args(["inherit-search", "--population", "2", "--sample-size", "3"])
        parser_args.handler(parser_args)


def test_quick_warm_start_bench_prints_every_side(capsys):
    from nas_benchmarks import warm_start

    parser = argparse.ArgumentParser()
    warm_start.register(parser.add_subparsers())
    args = parser.parse_args(["warm-start", "--quick"])
    assert args.handler(args) == 0
    out = capsys.readouterr().out
    for side in ("cold, 10 trials", "warm (10 told), its 10 trials", "cold, 20 trials (same total)"):
        assert side in out
    with pytest.raises(ValueError, match="--options must be a JSON object"):
        args = parser.parse_args(["warm-start", "--quick", "--options", "[1]"])
        args.handler(args)
