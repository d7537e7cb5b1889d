"""Optuna's multi-objective samplers as a strategy: a study with one maximised direction per objective,
told each result's scores; infeasible trials as constraint violations; resumable state; one-line refusals."""

from __future__ import annotations

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState as OptunaState
from test_mo_evolution import REFERENCE, result, true_front, two_scores

from nas.core.objectives import hypervolume, nondominated
from nas.core.types import FailureKind, Result
from nas.run.snapshot import read_snapshot, write_snapshot
from nas.search_spaces.toy import ToySpace
from nas.strategies.optuna_sampler import MO_SAMPLERS, STUDY_NAME, VIOLATION, OptunaStrategy

OBJ = ["acc", "size:min"]


def mo(sampler, seed=1, **kw):
    return OptunaStrategy(ToySpace(), sampler=sampler, objectives=OBJ, seed=seed, **{"startup": 3, "population": 4,
                                                                                       **kw})


def infeasible(trial):
    return Result.failed(trial.trial_id, "params 2e6 > 1e6", failure=FailureKind.INFEASIBLE)


def steps(s, pending, n):
    """Keep two in flight; every fourth trial is infeasible."""
    asked = []
    for _ in range(n):
        while len(pending) < 2:
            pending.append(s.ask())
            asked.append(pending[-1])
        t = pending.pop(0)
        s.tell(t, infeasible(t) if t.trial_id % 4 == 3 else result(t, two_scores(t.arch)))
    return asked


@pytest.mark.parametrize("sampler", MO_SAMPLERS)
def test_every_multi_objective_sampler_searches_and_resumes_from_its_state(sampler, tmp_path):
    s = mo(sampler)
    pending: list = []
    steps(s, pending, 7)
    assert s.study.directions == [optuna.study.StudyDirection.MAXIMIZE] * 2
    write_snapshot(tmp_path / "s.json", s.state_dict())
    restored = mo(sampler, seed=99)
    restored.load_state_dict(read_snapshot(tmp_path / "s.json"))
    a, b = steps(s, list(pending), 3), steps(restored, list(pending), 3)
    assert [t.to_dict() for t in a] == [t.to_dict() for t in b]
    done = [t for t in s.study.trials if t.state == OptunaState.COMPLETE]
    assert all(len(t.values) == 2 for t in done)


def test_infeasible_trials_are_constraint_violations_that_never_reach_the_front(tmp_path):
    journal = tmp_path / "optuna.journal"
    s = mo("nsga2", storage=journal)
    a, b, c = s.ask(), s.ask(), s.ask()
    s.tell(a, infeasible(a))  # nothing feasible yet: told FAIL (Optuna needs values)
    s.tell(b, result(b, [-3.0, -10.0]))
    s.tell(c, infeasible(c))
    trials = s.study.trials
    assert [t.state for t in trials] == [OptunaState.FAIL, OptunaState.COMPLETE, OptunaState.COMPLETE]
    assert trials[1].constraints == {VIOLATION: 0.0} and trials[2].constraints == {VIOLATION: 1.0}
    assert trials[2].values == [-3.0, -10.0]  # the worst feasible value of each objective
    assert [t.number for t in s.study.best_trials] == [1]
    # the violation is in the journal: a study reopened from it (as a resume does) has it
    s.state_dict()
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(journal)))
    again = optuna.load_study(study_name=STUDY_NAME, storage=storage)
    assert again.trials[2].constraints == {VIOLATION: 1.0}
    # and in an in-memory study's snapshot
    m = mo("nsga2")
    steps(m, [], 8)
    write_snapshot(tmp_path / "m.json", m.state_dict())
    r = mo("nsga2", seed=5)
    r.load_state_dict(read_snapshot(tmp_path / "m.json"))
    assert [(t.values, t.constraints) for t in r.study.trials] == [(t.values, t.constraints) for t in m.study.trials]


def test_samplers_that_cannot_take_several_objectives_are_refused_in_one_line():
    with pytest.raises(ValueError) as err:
        mo("cmaes")
    assert str(err.value) == ("sampler 'cmaes' cannot search several objectives; allowed with several: "
                              "nsga2, nsga3, tpe, gp, random")
    with pytest.raises(ValueError, match="sampler 'nsga2' is for several objectives .* use one of tpe, random"):
        OptunaStrategy(ToySpace(), sampler="nsga2", objectives=["acc"])
    with pytest.raises(ValueError, match="population must be an integer >= 2, got 1"):
        mo("nsga2", population=1)
    s = mo("tpe")
    t = s.ask()
    with pytest.raises(ValueError, match=r"trial 0's result has scores \[1.0\]; this study has 2 objectives"):
        s.tell(t, result(t, [1.0]))


def test_one_objective_keeps_the_single_objective_study():
    s = OptunaStrategy(ToySpace(), objectives=["val_acc"], seed=0)
    t = s.ask()
    s.tell(t, Result(t.trial_id, result(t, [0.5]).state, score=0.5))
    assert s.study.directions == [optuna.study.StudyDirection.MAXIMIZE] and s.study.best_value == 0.5


@pytest.mark.parametrize("sampler", ["nsga2", "tpe"])
def test_nsga2_and_tpe_find_more_of_the_known_front_than_random(sampler):
    best = hypervolume(true_front(), REFERENCE)

    def ratio(name):
        s = OptunaStrategy(ToySpace(), sampler=name, objectives=OBJ, seed=0, population=20)
        points = []
        for _ in range(200):
            t = s.ask()
            points.append(two_scores(t.arch))
            s.tell(t, result(t, points[-1]))
        p = np.array(points)
        return hypervolume(p[nondominated(p)], REFERENCE) / best

    found, baseline = ratio(sampler), ratio("random")
    assert found > baseline and found > 0.95, (found, baseline)
