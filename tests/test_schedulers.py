"""Schedulers: the contract every registered scheduler passes (tests/test_scheduler_algorithms.py checks
each algorithm on known answers).

No Ray, no clocks: :class:`Sim` drives a scheduler as an asynchronous loop would (a few workers, trials
interleaved epoch by epoch, promotions before new trials, some trials failing between rungs).
"""

from __future__ import annotations

import json

import pytest

from nas.core.registry import schedulers
from nas.core.scheduler import Phase, make_scheduler
from nas.core.types import Decision

C, S, P = Decision.CONTINUE, Decision.STOP, Decision.PAUSE
CONFIGS = [(name, {}) for name in schedulers.names()] + [("asha", {"variant": "promotion"}),
                                                        ("hyperband", {"variant": "promotion"})]
IDS = [f"{n}-{o.get('variant', 'default')}" for n, o in CONFIGS]


def curve(trial_id: int, epoch: int) -> float:
    """A learning curve per trial: its quality (a fixed shuffle of ids) times a rising profile."""
    quality = ((trial_id * 37) % 23) / 23
    return quality * (1 - 0.6**epoch) + 0.01 * ((trial_id * epoch) % 5)


class Sim:
    """An asynchronous loop in miniature: ``workers`` slots; trial ``t`` fails at epoch 2 when ``t % 7 == 3``."""

    def __init__(self, scheduler, n_trials: int = 40, workers: int = 3) -> None:
        self.s, self.n_trials, self.workers = scheduler, n_trials, workers
        self.running: dict[int, int] = {}  # trial -> epochs trained
        self.next_id, self.steps = 0, 0
        self.log: list[tuple] = []

    def fill(self) -> None:
        while len(self.running) < self.workers:
            promotion = self.s.promote()
            if promotion is not None:
                assert promotion.trial_id not in self.running
                self.running[promotion.trial_id] = promotion.epoch
                self.log.append(("promote", promotion.trial_id, promotion.epoch, promotion.until))
            elif self.next_id < self.n_trials:
                self.s.on_start(self.next_id)
                self.running[self.next_id] = 0
                self.next_id += 1
            else:
                return

    def step(self) -> bool:
        self.fill()
        if not self.running:
            return False
        order = sorted(self.running)
        t = order[self.steps % len(order)]
        self.steps += 1
        epoch = self.running[t] + 1
        if t % 7 == 3 and epoch == 2:
            self.s.on_failed(t)
            del self.running[t]
            self.log.append(("failed", t))
            return True
        decision = self.s.on_report(t, epoch, curve(t, epoch))
        self.log.append((t, epoch, decision.value))
        if decision is C and epoch < self.s.max_epochs:
            self.running[t] = epoch
        else:
            if decision in (C, P):  # it ends here (a paused run too: then it may be promoted)
                self.s.on_result(t, epoch, curve(t, epoch))
            del self.running[t]
        return True

    def run(self, max_steps: int = 100_000) -> list[tuple]:
        while self.steps < max_steps and self.step():
            pass
        return self.log


def new(name, options, seed=0, max_epochs=9):
    return make_scheduler(name, max_epochs=max_epochs, seed=seed, options=options)


# -- the contract --------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "options"), CONFIGS, ids=IDS)
def test_same_seed_same_decisions_and_only_allowed_ones(name, options):
    a, b = Sim(new(name, options)).run(), Sim(new(name, options)).run()
    assert a == b
    allowed = {"CONTINUE", "STOP"} | ({"PAUSE"} if new(name, options).pauses else set())
    decisions = {e[2] for e in a if isinstance(e[0], int)}
    assert decisions <= allowed
    assert any(e[0] == "failed" for e in a)


@pytest.mark.parametrize(("name", "options"), CONFIGS, ids=IDS)
def test_state_round_trip_mid_run_gives_the_same_decisions_after(name, options):
    first = Sim(new(name, options))
    for _ in range(70):
        first.step()
    done = len(first.log)
    state = json.loads(json.dumps(first.s.state_dict()))  # snapshots are JSON
    restored = new(name, options, seed=123)  # the seed must not matter: the state carries the rng
    restored.load_state_dict(state)
    second = Sim(restored)
    second.running, second.next_id, second.steps = dict(first.running), first.next_id, first.steps
    assert first.run()[done:] == second.run()
    assert json.dumps(first.s.state_dict(), sort_keys=True) == json.dumps(second.s.state_dict(), sort_keys=True)


@pytest.mark.parametrize(("name", "options"), CONFIGS, ids=IDS)
def test_failures_unknown_and_late_reports_are_tolerated(name, options):
    s = new(name, options)
    sim = Sim(s)
    sim.run()
    failed = {e[1] for e in sim.log if e[0] == "failed"}
    assert failed and all(s.trials[t].phase is Phase.FAILED for t in failed)
    for t in failed:  # a failed trial is never promoted afterwards
        after = sim.log[sim.log.index(("failed", t)):]
        assert not any(e[0] == "promote" and e[1] == t for e in after)
    t = min(failed)
    assert s.on_report(t, 5, 0.9) is S  # a late report of a failed trial
    assert s.on_report(1000, 1, 0.5) in (C, S, P)  # a trial it never saw starts on its first report
    s.on_result(1001, 3, 0.4)  # ... or ends on its result
    s.on_failed(1002)
    assert s.trials[1001].phase in (Phase.DONE, Phase.STOPPED, Phase.PAUSED)  # as its epoch-3 report says
    assert s.trials[1002].phase is Phase.FAILED
    assert s.on_report(1003, 1, float("nan")) is S and s.on_report(1003, 2, 0.5) is S
    assert s.on_report(1004, 1, 0.5) in (C, S, P)


@pytest.mark.parametrize(("name", "options"), CONFIGS, ids=IDS)
def test_a_repeated_epoch_changes_nothing(name, options):
    sim = Sim(new(name, options))
    for _ in range(30):
        sim.step()
    t = next(t for t, e in sorted(sim.running.items()) if e >= 1)
    before = json.dumps(sim.s.state_dict(), sort_keys=True)
    assert sim.s.on_report(t, 1, 0.0) is C  # a restart without its checkpoint reports epoch 1 again
    assert json.dumps(sim.s.state_dict(), sort_keys=True) == before


@pytest.mark.parametrize("name", schedulers.names())
def test_bad_options_are_one_line_errors(name):
    with pytest.raises(ValueError, match=r"unknown options \['nope'\] for scheduler .*; allowed: \["):
        new(name, {"nope": 1})
    with pytest.raises(ValueError, match="max_epochs must be an integer >= 1, got 0"):
        new(name, {}, max_epochs=0)
    with pytest.raises(ValueError, match="epoch must be an integer >= 1, got 0"):
        new(name, {}).on_report(0, 0, 0.5)


def test_unknown_scheduler_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown scheduler 'ashaa' \(did you mean 'asha'\?\); known: asha, "
                       "hyperband, median, none"):
        make_scheduler("ashaa", max_epochs=9)


@pytest.mark.parametrize("options", [{"eta": 1}, {"eta": 0.5}, {"eta": True}, {"eta": float("inf")}, {"eta": "3"},
                                     {"grace_period": 10}, {"grace_period": 0}, {"variant": "halving"}])
@pytest.mark.parametrize("name", ["asha", "hyperband"])
def test_asha_options_out_of_range(name, options):
    with pytest.raises(ValueError, match=r"^(eta|grace_period|unknown ASHA variant)"):
        new(name, options)


@pytest.mark.parametrize("options", [{"grace_period": 10}, {"min_samples": 0}])
def test_median_options_out_of_range(options):
    with pytest.raises(ValueError, match=r"^(grace_period|min_samples)"):
        new("median", options)
