"""Random search's dedup: no repeat until the space is exhausted (small spaces) or within a bounded
window of recent asks (large ones), so its state and snapshot stay O(1) in the run's length (no Ray)."""

from __future__ import annotations

from nas.core.types import arch_key
from nas.run.snapshot import read_snapshot, write_snapshot
from nas.search_spaces.toy import ToySpace
from nas.strategies import random as random_strategy
from nas.strategies.random import RandomSearch


def test_a_small_space_is_covered_before_repeats_then_a_new_round_starts():
    """Rejection sampling (100 tries an ask) ends a round when it finds nothing new: near its end."""
    s = RandomSearch(ToySpace(), seed=0)
    first = [arch_key(s.ask().arch) for _ in range(ToySpace().size)]
    assert len(set(first[:3000])) == 3000
    assert len(s._recent) < 100  # a new round has begun
    second = [arch_key(s.ask().arch) for _ in range(ToySpace().size)]
    assert len(set(first + second)) > 3100  # two rounds cover nearly every cell


def test_a_larger_space_has_no_repeat_within_the_window_and_the_snapshot_holds_only_the_window(
        monkeypatch, tmp_path):
    monkeypatch.setattr(random_strategy, "DEDUP_WINDOW", 40)
    s = RandomSearch(ToySpace(), seed=0)  # 3,125 architectures, a window of 40
    keys = [arch_key(s.ask().arch) for _ in range(2000)]
    assert all(len(set(keys[i:i + 40])) == 40 for i in range(len(keys) - 40))
    assert len(set(keys)) < 2000  # beyond the window repeats may come, as without dedup
    write_snapshot(tmp_path / "s.json", s.state_dict())
    restored = RandomSearch(ToySpace(), seed=1)
    restored.load_state_dict(read_snapshot(tmp_path / "s.json"))
    assert len(restored._recent) == 40
    assert [s.ask().arch for _ in range(50)] == [restored.ask().arch for _ in range(50)]
