"""The built-in nb201 and macro spaces: sizes, notation, benchmark codes, and that their models run."""

from __future__ import annotations

import csv
import doctest

import numpy as np
import pytest
import torch

from nas.core.registry import spaces
from nas.core.space import InvalidArchitecture, Task
from nas.engine.tabular.nb201_table import data_path
from nas.search_spaces import macro, nb201
from nas.search_spaces.macro import MacroSpace
from nas.search_spaces.nb201 import EDGE_NAMES, OPS, NB201Space, from_op_code, op_code

NB201_CSV = data_path()  # the NAS-Bench-201 table that ships with the package
DIGITS = Task(input_shape=(1, 8, 8), num_classes=10)


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def forward_ok(model: torch.nn.Module, task: Task, batch: int = 4) -> torch.Tensor:
    out = model(torch.randn(batch, *task.input_shape))
    assert out.shape == (batch, task.num_classes)
    assert torch.isfinite(out).all()
    return out


@pytest.mark.parametrize("module", [nb201, macro])
def test_doctests(module):
    failures, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert failures == 0


def test_registered():
    assert spaces.get("nb201") is NB201Space
    assert spaces.get("macro") is MacroSpace


# -- nb201 ------------------------------------------------------------------------------------------

def test_nb201_decisions_and_size():
    space = NB201Space()
    assert list(space.decisions) == ["edge_1_0", "edge_2_0", "edge_2_1", "edge_3_0", "edge_3_1", "edge_3_2"]
    assert all(opts == OPS for opts in space.decisions.values())
    assert OPS == ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")
    assert space.size == 5**6 == 15625


def test_nb201_format_parse_round_trip():
    space, rng = NB201Space(), np.random.default_rng(0)
    for _ in range(200):
        arch = space.sample(rng)
        text = space.format(arch)
        assert space.parse(text) == arch
        assert from_op_code(op_code(arch)) == arch
    arch = from_op_code("301234")
    assert space.format(arch) == (
        "|nor_conv_3x3~0|+|none~0|skip_connect~1|+|nor_conv_1x1~0|nor_conv_3x3~1|avg_pool_3x3~2|"
    )


def test_nb201_codes_match_benchmark_csv():
    space = NB201Space()
    with NB201_CSV.open(newline="") as f:
        rows = [row for i, row in zip(range(300), csv.DictReader(f)) if i % 37 == 0 or i < 3]
    assert len(rows) > 5
    for row in rows:
        arch = space.parse(row["arch_str"])
        assert op_code(arch) == row["op_code"]
        assert space.format(from_op_code(row["op_code"])) == row["arch_str"]


def test_nb201_paper_sized_model_matches_benchmark_param_counts():
    """With the paper's C=16, N=5 on CIFAR-10 inputs, parameter counts equal the benchmark's."""
    space, cifar10 = NB201Space(channels=16, cells_per_stage=5), Task(input_shape=(3, 32, 32), num_classes=10)
    with NB201_CSV.open(newline="") as f:
        rows = [row for i, row in zip(range(500), csv.DictReader(f)) if i % 100 == 1]
    for row in rows:
        model = space.build(from_op_code(row["op_code"]), cifar10)
        assert n_params(model) == round(float(row["c10_params_M"]) * 1e6), row["arch_str"]


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("|conv_5x5~0|+|none~0|none~1|+|none~0|none~1|none~2|", "conv_5x5~0"),
        ("|none~1|+|none~0|none~1|+|none~0|none~1|none~2|", "none~1"),
        ("|none~0|+|none~0|none~1|", "3 '+'-separated nodes"),
        ("|none~0|+|none~0|+|none~0|none~1|none~2|", "node 2 needs 2 edges"),
        ("|none|+|none~0|none~1|+|none~0|none~1|none~2|", "'none'"),
    ],
)
def test_nb201_parse_rejects_bad_strings(text, fragment):
    with pytest.raises(InvalidArchitecture) as info:
        NB201Space().parse(text)
    assert fragment in str(info.value)
    if "bad token" in str(info.value):
        assert "avg_pool_3x3" in str(info.value)  # names the allowed ops


def test_nb201_bad_op_code():
    with pytest.raises(InvalidArchitecture, match="'12345'"):
        from_op_code("12345")
    with pytest.raises(InvalidArchitecture, match="'123456'"):
        from_op_code("123456")


def test_nb201_builds_and_runs_sampled_archs():
    space, rng = NB201Space(channels=8), np.random.default_rng(1)
    for _ in range(30):
        forward_ok(space.check_build(space.sample(rng), DIGITS), DIGITS)


def test_nb201_other_image_shapes():
    space = NB201Space(channels=4)
    arch = from_op_code("334131")
    for shape in [(3, 7, 7), (3, 1, 1), (2, 9, 5)]:
        task = Task(input_shape=shape, num_classes=3)
        forward_ok(space.build(arch, task), task, batch=2)


def test_nb201_all_none_cell_is_finite_and_trains():
    space = NB201Space()
    model = space.build(from_op_code("000000"), DIGITS)
    model.train()
    out = forward_ok(model, DIGITS)
    out.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.eval()
    forward_ok(model, DIGITS)


def test_nb201_backward_reaches_cell_weights():
    model = NB201Space().build(from_op_code("333333"), DIGITS)
    loss = torch.nn.functional.cross_entropy(
        model(torch.randn(4, 1, 8, 8)), torch.tensor([0, 1, 2, 3]))
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)


def test_nb201_params_grow_with_channels_and_cells():
    arch = from_op_code("333333")
    small, wide = (n_params(NB201Space(channels=c).build(arch, DIGITS)) for c in (8, 16))
    deep = n_params(NB201Space(cells_per_stage=2).build(arch, DIGITS))
    assert small < wide < deep
    # ops without weights: the cells add nothing, only stem, reductions and head have weights
    assert n_params(NB201Space().build(from_op_code("000000"), DIGITS)) == n_params(
        NB201Space().build(from_op_code("141414"), DIGITS))


@pytest.mark.parametrize(
    "options, fragment",
    [({"channels": 0}, "channels=0"), ({"channels": 2.5}, "channels=2.5"),
     ({"cells_per_stage": -1}, "cells_per_stage=-1"), ({"cells_per_stage": True}, "cells_per_stage=True")],
)
def test_nb201_bad_options(options, fragment):
    with pytest.raises(ValueError, match=fragment):
        NB201Space(**options)


def test_nb201_needs_image_inputs():
    with pytest.raises(ValueError, match=r"image inputs \(C, H, W\)"):
        NB201Space().build(from_op_code("333333"), Task(input_shape=(64,), num_classes=10))


def test_nb201_validates_arch():
    arch = dict(from_op_code("333333"), edge_3_2="conv_7x7")
    with pytest.raises(InvalidArchitecture, match="conv_7x7"):
        NB201Space().build(arch, DIGITS)
    assert EDGE_NAMES[-1] == "edge_3_2"


# -- macro ------------------------------------------------------------------------------------------

def test_macro_decisions_and_size():
    space = MacroSpace()
    assert 8 <= len(space.decisions) <= 10
    assert space.decisions["depth"] == (1, 2, 3)
    assert space.size == 3 * 3**3 * 2**3 * 3 * 2 * 3
    arch = space.sample(np.random.default_rng(0))
    assert space.parse(space.format(arch)) == arch


@pytest.mark.parametrize("task", [DIGITS, Task(input_shape=(3, 5, 6), num_classes=4),
                                  Task(input_shape=(20,), num_classes=3)])
def test_macro_builds_and_runs_sampled_archs(task):
    space, rng = MacroSpace(), np.random.default_rng(2)
    for _ in range(25):
        model = space.check_build(space.sample(rng), task)
        out = forward_ok(model, task)
        out.sum().backward()
        model.eval()
        forward_ok(model, task)


def test_macro_network_follows_decisions():
    space = MacroSpace()
    base = {"depth": 1, "width_0": 16, "width_1": 16, "width_2": 16, "kernel_0": 3, "kernel_1": 3,
            "kernel_2": 3, "activation": "relu", "norm": "none", "dropout": 0.0}
    sizes = [n_params(space.build(dict(base, depth=d), DIGITS)) for d in (1, 2, 3)]
    assert sizes[0] < sizes[1] < sizes[2]
    assert n_params(space.build(dict(base, width_0=64), DIGITS)) > sizes[0]
    assert n_params(space.build(dict(base, kernel_0=5), DIGITS)) > sizes[0]
    # unused decisions: blocks beyond depth, and kernels of an MLP
    assert n_params(space.build(dict(base, width_2=64), DIGITS)) == sizes[0]
    tabular = Task(input_shape=(10,), num_classes=2)
    assert n_params(space.build(dict(base, kernel_0=5), tabular)) == n_params(space.build(base, tabular))
    model = space.build(dict(base, activation="silu", norm="batch", dropout=0.3), DIGITS)
    kinds = {type(m) for m in model.modules()}
    assert {torch.nn.SiLU, torch.nn.BatchNorm2d, torch.nn.Dropout} <= kinds
