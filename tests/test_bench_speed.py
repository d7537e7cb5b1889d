"""``nas bench strategy-speed`` and ``nas bench snapshot-size``: each strategy driven through the real search loop on
the in-process executor with a scoring training function (PBT's exploit included), figures printed, bad input one
line."""

from __future__ import annotations

import pytest

from nas.api import resolve_space
from nas.cli import main
from nas_benchmarks import snapshot_size, strategy_speed


def test_strategy_speed_times_the_pairs_after_the_warm_up_apart_from_the_rest_of_the_loop():
    row = strategy_speed.measure("pbt", resolve_space("toy"), population=8, pairs=40, seconds=60.0)
    assert row["pairs"] == 40 and row["options"] == {"population": 8}
    assert row["us_per_pair"] > 0 and row["rest_us_per_pair"] > 0 and row["state_kb"] > 0
    quick = strategy_speed.measure("random", resolve_space("toy"), population=5, pairs=10_000, seconds=1e-9)
    assert quick["pairs"] == 20  # out of time: the 20 pairs it always times


def test_snapshot_size_rows_at_each_mark_for_every_strategy(capsys):
    rows = snapshot_size.measure("pbt", {"population": 4}, [30, 60], in_flight=3)
    assert [r["trials"] for r in rows] == [30, 60] and all(r["bytes"] > 0 and r["drive_s"] >= 0 for r in rows)
    assert main(["bench", "snapshot-size", "--strategies", "random,evolution", "--trials", "20,40",
                 "--in-flight", "4"]) == 0
    out = capsys.readouterr().out
    assert "snapshot B" in out and out.count("random") == 2 and out.count("evolution") == 2


@pytest.mark.parametrize("argv, message", [
    (["snapshot-size", "--trials", "10,x"], "--trials must be comma-separated integers, got '10,x'"),
    (["snapshot-size", "--in-flight", "0"], "--in-flight must be >= 1, got 0"),
    (["snapshot-size", "--strategies", "evolutoin"],
     "unknown strategy 'evolutoin' (did you mean 'evolution'?); known:"),
    (["strategy-speed", "--pairs", "0"], "--pairs must be >= 1, got 0"),
])
def test_bad_input_is_one_line(capsys, argv, message):
    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
