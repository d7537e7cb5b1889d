"""Strategies whose trials carry a parent set ``inherit_from`` (the rule of nas.train.inherit): evolution with
``inherit=true``, PBT when its explore step mutates the architecture."""

from __future__ import annotations

import pytest

from nas.core.types import Outcome, Result
from nas.engine.inprocess import InProcessExecutor
from nas.engine.loop import SearchLoop
from nas.search_spaces.toy import ToySpace, toy_score
from nas.strategies.evolution import RegularizedEvolution
from nas.strategies.pbt import MISSING_CHECKPOINT, PopulationBasedTraining
from nas.strategies.random import RandomSearch
from tests.helpers import saving_curve


def complete(trial, score, epoch=1):
    return Result(trial.trial_id, Outcome.COMPLETE, score=score, epoch=epoch)


def test_evolution_children_inherit_from_their_parent_and_every_trial_keeps_its_checkpoint():
    evo = RegularizedEvolution(ToySpace(), population=4, sample_size=2, inherit=True, child_epochs=1, seed=0)
    first = [evo.ask() for _ in range(4)]
    assert all(t.save_checkpoint and t.inherit_from is None and t.epochs is None for t in first)
    for t in first:
        evo.tell(t, complete(t, toy_score(t.arch)))
    for _ in range(10):
        child = evo.ask()
        assert child.parent is not None and child.inherit_from == child.parent
        assert child.save_checkpoint and child.epochs == 1 and child.checkpoint_from is None
        evo.tell(child, complete(child, toy_score(child.arch)))


def test_evolution_without_inherit_asks_exactly_what_it_did_before():
    plain = RegularizedEvolution(ToySpace(), population=3, sample_size=2, seed=5)
    inherit = RegularizedEvolution(ToySpace(), population=3, sample_size=2, inherit=True, seed=5)
    for _ in range(12):
        a, b = plain.ask(), inherit.ask()
        assert (a.arch, a.parent) == (b.arch, b.parent)  # same seed, same search; only the fields differ
        assert not a.save_checkpoint and a.inherit_from is None and a.epochs is None
        plain.tell(a, complete(a, toy_score(a.arch)))
        inherit.tell(b, complete(b, toy_score(b.arch)))
    state = inherit.state_dict()
    again = RegularizedEvolution(ToySpace(), population=3, sample_size=2, inherit=True, seed=0)
    again.load_state_dict(state)
    assert again.ask() == inherit.ask()


@pytest.mark.parametrize(("options", "message"), [
    ({"inherit": "yes"}, "inherit must be true or false, got 'yes'"),
    ({"child_epochs": 2}, "child_epochs=2 needs inherit=true"),
    ({"inherit": True, "child_epochs": 0}, "child_epochs must be an integer >= 1, got 0"),
])
def test_evolution_bad_inherit_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        RegularizedEvolution(ToySpace(), **options)


@pytest.mark.parametrize("make", [
    lambda v: RegularizedEvolution(ToySpace(), dedup=v),
    lambda v: RandomSearch(ToySpace(), dedup=v),
    lambda v: RegularizedEvolution(ToySpace(), inherit=v),
])
@pytest.mark.parametrize("value", ["no", "off", 0, 1, None])
def test_boolean_strategy_options_take_only_true_or_false(make, value):
    # (dedup="no" was kept, and bool("no") is True: a user asking for no dedup got dedup)
    with pytest.raises(ValueError, match=r"(dedup|inherit) must be true or false, got "):
        make(value)
    assert make(False) is not None and make(True) is not None


def retire_member_0(pbt):
    first = [pbt.ask() for _ in range(4)]
    for t, s in zip(first[1:], [5.0, 6.0, 9.0]):
        pbt.tell(t, complete(t, s, epoch=3))
    pbt.tell(first[0], complete(first[0], 1.0, epoch=3))  # the worst: retired, copies member 3
    child = next(t for t in (pbt.ask() for _ in range(4)) if t.member == 0)
    return first, child


def test_pbt_explore_that_mutates_the_architecture_inherits_instead_of_resuming():
    pbt = PopulationBasedTraining(ToySpace(), population=4, arch_mutation=1.0, seed=0)
    first, child = retire_member_0(pbt)
    donor = first[3]
    assert child.inherit_from == donor.trial_id == child.parent and child.checkpoint_from is None
    assert sum(child.arch[k] != donor.arch[k] for k in child.arch) == 1  # one decision mutated
    assert pbt.members[0].epoch == 0 and child.save_checkpoint
    pbt.tell(child, complete(child, 7.0, epoch=1))
    nxt = next(t for t in (pbt.ask() for _ in range(4)) if t is not None and t.member == 0)
    assert nxt.checkpoint_from == child.trial_id and nxt.inherit_from is None and nxt.arch == child.arch
    restored = PopulationBasedTraining(ToySpace(), population=4, arch_mutation=1.0, seed=1)
    restored.load_state_dict(pbt.state_dict())
    assert [vars(m) for m in restored.members] == [vars(m) for m in pbt.members]


def test_pbt_without_arch_mutation_keeps_resuming_the_donor():
    pbt = PopulationBasedTraining(ToySpace(), population=4, seed=0)
    first, child = retire_member_0(pbt)
    assert child.checkpoint_from == first[3].trial_id and child.inherit_from is None
    assert child.arch == first[3].arch


def test_pbt_missing_inherited_checkpoint_restarts_the_member_fresh():
    pbt = PopulationBasedTraining(ToySpace(), population=4, arch_mutation=1.0, seed=0)
    _, child = retire_member_0(pbt)
    pbt.tell(child, Result.failed(child.trial_id, f"{MISSING_CHECKPOINT} for trial {child.inherit_from}"))
    again = next(t for t in (pbt.ask() for _ in range(4)) if t is not None and t.member == 0)
    assert again.inherit_from is None and again.checkpoint_from is None and again.arch == child.arch
    assert pbt.checkpoints  # the trainer may keep checkpoints: only this one was gone


def test_pbt_bad_arch_mutation_is_named():
    with pytest.raises(ValueError, match="arch_mutation must be in \\[0.0, 1.0\\], got 1.5"):
        PopulationBasedTraining(ToySpace(), arch_mutation=1.5)


def test_a_child_without_data_gets_its_parents_state():
    """A training function run without data (data=None) got no ``ctx.inherited``: the runner dropped the parent's
    checkpoint that the executor handed it, so a child started as if it had no parent."""
    evo = RegularizedEvolution(ToySpace(), population=4, sample_size=2, inherit=True, seed=0)
    results = {t.trial_id: (t, r) for t, r in
               SearchLoop(evo, InProcessExecutor(ToySpace(), None, train=saving_curve), budget=12).run()}
    children = [(t, r) for t, r in results.values() if t.inherit_from is not None]
    assert len(children) == 8 and all(r.ok for _, r in results.values())
    for t, r in children:  # (saving_curve goes on from the epoch of the state it inherits)
        assert r.history[0]["epoch"] == results[t.inherit_from][1].epoch + 1
        assert r.metrics["inherited_from"] == t.inherit_from


@pytest.mark.parametrize("strategy", [
    lambda: PopulationBasedTraining(ToySpace(), population=12, seed=0),
    lambda: RegularizedEvolution(ToySpace(), population=12, sample_size=3, inherit=True, seed=0),
])
def test_a_population_past_the_executors_bound_keeps_the_checkpoints_it_starts_from(strategy):
    """With 12 members and 8 checkpoints kept, the oldest went while trials still started from them: they failed as
    CHECKPOINT_MISSING (PBT's members restarted from scratch: 242 of 1,500 segments with 300 members and 256 kept;
    evolution's children: 286 of 1,500 with a population of 400). The bound now grows to the population and the
    trials in flight, and what goes first is what no trial will start from."""
    executor = InProcessExecutor(ToySpace(), None, train=saving_curve, slots=3)
    executor.checkpoints.keep = 8
    chosen = strategy()
    results = SearchLoop(chosen, executor, budget=120).run()
    assert executor.checkpoints.keep == 12 + 2 * 3 + 1 and len(results) == 120
    assert all(r.failure is None for _, r in results)
    started = [t for t, _ in results if (t.checkpoint_from, t.inherit_from) != (None, None)]
    assert len(started) > 60  # (each of them found its checkpoint)



def test_a_child_that_trains_its_own_epochs_anneals_its_schedule_over_them(tmp_path):
    """(A child's cosine spanned the run's --epochs, not its child_epochs: it ended at 77% of its learning rate and
    was ranked against annealed members.)"""
    import nas

    df = nas.search(ToySpace(), "evolution", budget=8, executor="inprocess", data=nas.load_dataset("digits"), seed=0,
                    epochs=3, schedule="cosine", lr=0.1, run_dir=tmp_path / "run", progress=False,
                    strategy_options={"population": 2, "sample_size": 2, "inherit": True, "child_epochs": 1})
    children = df[df.parent.notna()]
    assert len(children) >= 4 and (children.epochs == 1).all()
    assert all(h[-1]["lr"] < 0.01 for h in children.history)  # (annealed over its one epoch: it ended at 0.077)
    assert all(h[-1]["lr"] < 0.01 for h in df[df.parent.isna()].history)


def test_a_pausing_scheduler_never_drops_the_checkpoint_of_a_member_children_inherit_from():
    """(Past the bound a pausing scheduler alone chose what went: ASHA drops ended trials first, which are exactly
    evolution's members, so their children failed as CHECKPOINT_MISSING: 68 of 600 trials.)"""
    from nas.core.scheduler import make_scheduler

    executor = InProcessExecutor(ToySpace(), None, train=saving_curve, slots=1)
    executor.checkpoints.keep = 2  # (the loop raises it to the population and the trials in flight: 13)
    strategy = RegularizedEvolution(ToySpace(), population=10, sample_size=3, inherit=True, seed=0)
    scheduler = make_scheduler("asha", max_epochs=3, seed=0, options={"variant": "promotion"})
    results = SearchLoop(strategy, executor, budget=60, scheduler=scheduler).run()  # (9 failed before)
    assert len(results) == 60 and sum(t.inherit_from is not None for t, _ in results) >= 40
    assert [r.error for _, r in results if r.failure is not None] == []
