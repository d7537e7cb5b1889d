"""Random search's dedup: no repeat until the space is exhausted (small spaces) or within a bounded
window of recent asks (large ones), so its state and snapshot stay O(1) in the run's length (no Ray)."""

from __future__ import annotations

import numpy as np

from nas.core.types import arch_key
from nas.run.snapshot import read_snapshot, write_snapshot
from nas.search_spaces.toy import ToySpace
from nas.strategies import random as random_strategy
from nas.strategies.random import RandomSearch


def test_a_small_space_is_covered_before_repeats_then_a_new_round_starts(tmp_path):
    """Rejection sampling (100 tries an ask) that found nothing new ended the round: the first repeat came at ask
    3,052 and 67 architectures were never proposed. Where it fails, the pick is among the unseen; resumable."""
    s = RandomSearch(ToySpace(), seed=0)
    first = [arch_key(s.ask().arch) for _ in range(3000)]
    write_snapshot(tmp_path / "s.json", s.state_dict())  # (in the round's tail, where rejection sampling fails)
    restored = RandomSearch(ToySpace(), seed=1)
    restored.load_state_dict(read_snapshot(tmp_path / "s.json"))
    tail = [arch_key(s.ask().arch) for _ in range(ToySpace().size - 3000)]
    assert [arch_key(restored.ask().arch) for _ in tail] == tail
    assert len(set(first + tail)) == ToySpace().size  # every architecture once
    second = [arch_key(s.ask().arch) for _ in range(ToySpace().size)]
    assert len(s._recent) == ToySpace().size and len(set(second)) == ToySpace().size  # a second round, the same
    assert second[:50] != first[:50]


def test_proposals_that_rejection_sampling_finds_are_unchanged():
    """Before a round's tail the asks are those of rejection sampling alone (the same seed, the same asks)."""
    s, space, rng, seen = RandomSearch(ToySpace(), seed=0), ToySpace(), np.random.default_rng(0), set()
    for _ in range(2000):
        arch = space.sample(rng)
        for _ in range(100):
            if arch_key(arch) not in seen:
                break
            arch = space.sample(rng)
        assert arch_key(arch) not in seen
        seen.add(arch_key(arch))
        assert s.ask().arch == arch


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
