"""Zero-cost proxies (nas.train.proxies) on real NAS-Bench-201 cells built with torch, and as training functions in a
real search on real data (digits) through the in-process executor: scoring instead of training, and a pre-screen
that makes a low-scoring candidate INFEASIBLE before it trains (no Ray)."""

from __future__ import annotations

import math

import pytest
import torch

from nas.core.space import Task
from nas.core.types import FailureKind
from nas.engine.inprocess import InProcessExecutor
from nas.engine.loop import SearchLoop
from nas.search_spaces.nb201 import NB201Space, from_op_code
from nas.strategies.random import RandomSearch
from nas.train.data import load_dataset
from nas.train.fit import fit
from nas.train.proxies import PROXIES, check_names, compute, rank_against, score_archs, scoring, screened
from nas.train.settings import TrainSettings

SPACE, TASK = NB201Space(channels=4), Task((3, 8, 8), 10)


@pytest.fixture(scope="module")
def batch():
    gen = torch.Generator().manual_seed(0)
    return torch.randn(16, 3, 8, 8, generator=gen), torch.randint(0, 10, (16,), generator=gen)


def build(code, seed=0):
    torch.manual_seed(seed)
    return SPACE.build(from_op_code(code), TASK)


def test_every_proxy_scores_a_real_cell_and_leaves_the_model_untouched(batch):
    model = build("334131")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    scores = compute(model, *batch)
    assert sorted(scores) == sorted(PROXIES) and all(math.isfinite(v) for v in scores.values())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items()) and model.training
    assert scores["params"] == sum(p.numel() for p in model.parameters())


def test_a_cell_that_passes_nothing_through_ranks_last(batch):
    dead, alive = compute(build("000000"), *batch), compute(build("334131"), *batch)
    assert dead["jacob_cov"] == -math.inf and dead["naswot"] == -math.inf
    for name in ("synflow", "snip", "grad_norm", "params"):
        assert dead[name] < alive[name], name


@pytest.mark.parametrize("activation", [torch.nn.ReLU, torch.nn.GELU, torch.nn.SiLU, torch.nn.LeakyReLU,
                                        torch.nn.ELU, torch.nn.Hardswish, torch.nn.Mish])
def test_naswot_codes_any_rectifier_by_its_pre_activation(activation):
    """(Only ReLUs were coded: every GELU and SiLU network of the macro space scored -inf.) A unit is active where
    its pre-activation is > 0, the paper's code for a ReLU: the same value whatever the activation."""
    linear = torch.nn.Linear(2, 3)
    with torch.no_grad():
        linear.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
        linear.bias.zero_()
    model = torch.nn.Sequential(linear, activation(), torch.nn.Linear(3, 2))
    x = torch.tensor([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]])
    # pre-activations (1, 1, 2), (1, -1, 0), (-1, 1, 0), (-1, -1, -2): codes 111, 100, 010, 000;
    # K[i, j] = 3 units - Hamming(c_i, c_j)
    kernel = [[3, 1, 1, 0],
              [1, 3, 1, 2],
              [1, 1, 3, 2],
              [0, 2, 2, 3]]
    det = float(torch.linalg.det(torch.tensor(kernel, dtype=torch.float64)))
    assert det == pytest.approx(12)
    assert compute(model, x, names=["naswot"])["naswot"] == pytest.approx(math.log(det))


def test_a_network_without_rectifiers_has_no_naswot_code():
    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    assert compute(model, torch.randn(4, 2), names=["naswot"])["naswot"] == -math.inf


def test_synflow_needs_no_data_and_the_others_say_they_do():
    model = build("334131")
    value = compute(model, names=["synflow"], input_shape=(3, 8, 8))["synflow"]
    assert value > 0 and value == compute(model, names=["synflow"], input_shape=(3, 8, 8))["synflow"]
    with pytest.raises(ValueError, match=r"proxies \['snip'\] need a minibatch"):
        compute(model, names=["snip", "synflow"], input_shape=(3, 8, 8))
    with pytest.raises(ValueError, match="unknown proxy 'flops'; known: synflow, snip"):
        check_names(["flops"])


def test_scores_of_a_list_of_architectures_are_seeded(batch):
    archs = [from_op_code(c) for c in ("334131", "111111", "000000")]
    a = score_archs(SPACE, archs, TASK, names=["synflow", "naswot"], x=batch[0], y=batch[1])
    b = score_archs(SPACE, archs, TASK, names=["synflow", "naswot"], x=batch[0], y=batch[1])
    assert a == b and len(a["synflow"]) == 3 and a["naswot"][2] == -math.inf


def test_rank_against_known_scores(batch):
    archs = [from_op_code(c) for c in ("334131", "111111", "000000", "333333")]
    params = score_archs(SPACE, archs, TASK, names=["params"])["params"]
    ranks = rank_against(SPACE, archs, params, TASK, names=["params", "naswot"], x=batch[0])
    assert ranks["params"] == (pytest.approx(1.0), pytest.approx(1.0)) and -1 <= ranks["naswot"][0] <= 1


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


def search(train, digits, budget=4):
    space = NB201Space(channels=4)
    ex = InProcessExecutor(space, digits, TrainSettings(epochs=1, seed=0, threads=1, objectives=("synflow:max",)
                                                        if isinstance(train, scoring) else ("val_acc:max",)),
                           train=train)
    return SearchLoop(RandomSearch(space, seed=0), ex, budget=budget).run()


def test_scoring_ranks_candidates_on_the_worker_instead_of_training(digits):
    results = search(scoring("synflow", "naswot", batch_size=32), digits)
    assert len(results) == 4
    for _, r in results:
        assert r.ok and r.score == r.metrics["synflow"] and "naswot" in r.metrics and "val_acc" not in r.metrics


def test_a_screen_makes_low_scorers_infeasible_before_training_and_trains_the_rest(digits):
    rejected = search(screened(fit, "synflow", minimum=1e300), digits, budget=2)
    for _, r in rejected:
        assert r.failure is FailureKind.INFEASIBLE and "synflow" in r.error and "< minimum" in r.error
        assert "epochs_trained" not in r.metrics
    kept = search(screened(fit, "synflow", minimum=0.0), digits, budget=2)
    for _, r in kept:
        assert r.ok and r.metrics["synflow"] > 0 and r.metrics["epochs_trained"] == 1
