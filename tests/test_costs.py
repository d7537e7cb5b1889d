"""Measured costs of real small torch models (exact params and FLOPs; latency only checked positive and
finite, never timed) and the constraints checked before training."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from nas.core.space import Task
from nas.core.types import FailureKind
from nas.search_spaces.macro import MacroSpace
from nas.train.constraints import Constraints, Violation
from nas.train.costs import Costs, count_flops, measure_costs, peak_memory

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/conftest.py)


def conv_net() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                               torch.nn.Flatten(), torch.nn.LazyLinear(3))


def test_exact_params_and_flops_of_a_small_cnn_with_a_lazy_layer():
    model = conv_net()
    costs = measure_costs(model, (1, 8, 8), batch_size=16, warmup=1, repeats=3)
    # conv: 4 * 9 weights + 4 biases; batch norm: 4 + 4; linear: 4 * 64 * 3 + 3
    assert costs.params == 40 + 8 + 771
    # conv 2 * (4 * 9) * 64 positions, linear 2 * 256 * 3 (FlopCounterMode counts neither bias nor norm)
    assert costs.flops == 2 * 36 * 64 + 2 * 256 * 3
    assert costs.batch_size == 16 and costs.device == "cpu" and costs.peak_memory_mb is None
    for latency in (costs.latency_ms, costs.latency_batch_ms):
        assert math.isfinite(latency) and latency > 0
    assert set(costs.to_dict()) == {"params", "flops", "latency_ms", "latency_batch_ms", "batch_size",
                                    "peak_memory_mb", "device"}


def test_flops_grow_with_the_batch_and_measuring_leaves_the_model_as_it_was():
    model = conv_net()
    model(torch.randn(2, 1, 8, 8))  # materialise, and give batch norm running stats
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert count_flops(model, torch.zeros(4, 1, 8, 8)) == 4 * count_flops(model, torch.zeros(1, 1, 8, 8))
    measure_costs(model, (1, 8, 8), batch_size=8, warmup=1, repeats=2)
    assert model.training  # its mode is back
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # eval mode: running stats untouched


@pytest.mark.parametrize("task", [Task((1, 8, 8), 10), Task((13,), 3)])
def test_models_of_the_built_in_space(task):
    space = MacroSpace()
    arch = space.sample(np.random.default_rng(0))
    model = space.build(arch, task)
    costs = measure_costs(model, task.input_shape, batch_size=8, warmup=1, repeats=2,
                          memory_format=torch.channels_last)
    assert costs.params == sum(p.numel() for p in model.parameters()) > 0
    assert costs.flops > 0 and costs.latency_ms > 0


def test_bad_measurement_settings():
    with pytest.raises(ValueError, match="need batch_size >= 1, warmup >= 0, repeats >= 1; got 0, 3, 10"):
        measure_costs(conv_net(), (1, 8, 8), batch_size=0)


def test_peak_memory_is_none_where_the_device_does_not_report_it():
    with peak_memory("cpu") as peak:
        torch.zeros(1000).sum()
    assert peak.mb is None


COSTS = Costs(params=1_000, flops=50_000, latency_ms=2.5, latency_batch_ms=9.0, batch_size=64,
              peak_memory_mb=None, device="cpu").to_dict()


def test_constraints_report_the_first_broken_bound_with_value_and_limit():
    assert not Constraints().active and Constraints().check(COSTS) is None
    assert Constraints(max_params=1_000, max_flops=50_000, max_latency_ms=2.5).check(COSTS) is None  # at the limit
    v = Constraints(max_params=999, max_latency_ms=1).check(COSTS)
    assert v == Violation("max_params", "params", 1000.0, 999.0) and v.kind is FailureKind.INFEASIBLE
    assert str(v) == "params 1000 > max_params 999"
    v = Constraints(max_flops=1e4, max_latency_ms=1).check(COSTS)
    assert (v.metric, v.value, v.limit) == ("flops", 50_000.0, 10_000.0)
    v = Constraints(max_latency_ms=1).check(COSTS)  # a result's metrics do as well
    assert str(v) == "latency_ms 2.5 > max_latency_ms 1"


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), True, "10"])
@pytest.mark.parametrize("name", ["max_params", "max_flops", "max_latency_ms"])
def test_a_constraint_must_be_a_positive_number(name, value):
    with pytest.raises(ValueError) as err:
        Constraints(**{name: value})
    assert str(err.value) == f"{name} must be a positive number, got {value!r}"
