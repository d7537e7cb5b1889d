"""Weight inheritance (Real et al. 2017) on the real built-in spaces: what a one-decision mutation keeps."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nas.core.space import Task
from nas.search_spaces.macro import MacroSpace
from nas.search_spaces.nb201 import EDGE_NAMES, NB201Space, from_op_code
from nas.train.hparams import make_optimizer
from nas.train.inherit import (
    inherit_optimizer_state,
    inherit_weights,
    optimizer_param_names,
)

IMAGES = Task(input_shape=(3, 8, 8), num_classes=10)
TABULAR = Task(input_shape=(13,), num_classes=3)


def build(space, arch, task, seed):
    """As the trainer builds: space.check_build, lazy modules materialised with a probe forward pass."""
    torch.manual_seed(seed)
    model = space.check_build(arch, task)
    if any(torch.nn.parameter.is_lazy(p) for p in model.parameters()):
        with torch.no_grad():
            model.eval()
            model(torch.zeros(2, *task.input_shape))
    return model


def snapshot(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def check_rule(child, before, parent_state, stats):
    """Every tensor is either the parent's (same name and shape) or its fresh initialisation (otherwise)."""
    copied = set()
    for name, tensor in child.state_dict().items():
        src = parent_state.get(name)
        if src is not None and src.shape == tensor.shape:
            assert torch.equal(tensor, src), name
            copied.add(name)
        else:
            assert torch.equal(tensor, before[name]), name
            assert name in stats.skipped
    assert stats.tensors_copied == len(copied) and set(stats.skipped) == set(child.state_dict()) - copied
    params = dict(child.named_parameters())
    assert stats.params_copied == sum(params[n].numel() for n in copied if n in params)
    assert stats.params_total == sum(p.numel() for p in params.values())
    return copied


@pytest.mark.parametrize("code", ["334131", "333333", "120304", "401243"])
def test_nb201_one_edge_mutation_keeps_every_edge_but_the_mutated_one(code):
    space, rng = NB201Space(), np.random.default_rng(int(code))
    parent_arch = from_op_code(code)
    parent = build(space, parent_arch, IMAGES, seed=0)
    with torch.no_grad():  # "trained": weights no fresh initialisation has
        for p in parent.parameters():
            p.add_(1.0)
    parent_state = snapshot(parent)
    for _ in range(6):
        child_arch = space.mutate(parent_arch, rng)
        (edge,) = [e for e in EDGE_NAMES if child_arch[e] != parent_arch[e]]
        child = build(space, child_arch, IMAGES, seed=1)
        before = snapshot(child)
        stats = inherit_weights(child, parent_state)
        copied = check_rule(child, before, parent_state, stats)
        outside = {n for n in before if f".ops.{edge}." not in n}
        assert outside <= copied  # every other edge, the stem, the reductions and the classifier
        assert all(f".ops.{edge}." in n for n in stats.skipped)
        if {parent_arch[edge], child_arch[edge]} == {"nor_conv_1x1", "nor_conv_3x3"}:
            assert {n.rsplit(".", 2)[-2:][0] for n in stats.skipped} == {"1"}  # only the conv kernel: BN kept
        if parent_arch[edge] in ("nor_conv_1x1", "nor_conv_3x3") and child_arch[edge] not in (
                "nor_conv_1x1", "nor_conv_3x3"):
            assert any(f".ops.{edge}." in n for n in stats.unused)  # the parent's edge has no place in the child


MACRO = {"depth": 2, "width_0": 16, "width_1": 32, "width_2": 64, "kernel_0": 3, "kernel_1": 5, "kernel_2": 3,
         "activation": "relu", "norm": "batch", "dropout": 0.1}


@pytest.mark.parametrize("task", [IMAGES, TABULAR], ids=["cnn", "mlp"])
def test_macro_every_layer_whose_shape_matches(task):
    space = MacroSpace()
    parent = build(space, MACRO, task, seed=0)
    parent_state = snapshot(parent)
    for name, options in space.decisions.items():
        for value in options:
            if value == MACRO[name]:
                continue
            child_arch = {**MACRO, name: value}
            child = build(space, child_arch, task, seed=1)
            before = snapshot(child)
            stats = inherit_weights(child, parent_state)
            check_rule(child, before, parent_state, stats)
            if name in ("activation", "dropout", "width_2") or (name.startswith("kernel") and (
                    task is TABULAR or name == "kernel_2")):
                assert stats.fraction == 1.0 and not stats.skipped, (name, value)  # nothing it uses changed


def test_macro_width_and_kernel_mutations_reset_exactly_the_layers_they_touch():
    space = MacroSpace()
    parent_state = snapshot(build(space, MACRO, IMAGES, seed=0))
    child = build(space, {**MACRO, "width_0": 32}, IMAGES, seed=1)
    stats = inherit_weights(child, parent_state)
    assert sorted(stats.skipped) == ["0.weight", "1.bias", "1.running_mean", "1.running_var", "1.weight",
                                     "3.weight"]  # conv 0's out, its BatchNorm, conv 1's in channels
    child = build(space, {**MACRO, "kernel_1": 3}, IMAGES, seed=1)
    stats = inherit_weights(child, parent_state)
    assert list(stats.skipped) == ["3.weight"] and stats.skipped["3.weight"].startswith("shape (32, 16, 3, 3)")
    child = build(space, {**MACRO, "depth": 3}, IMAGES, seed=1)
    stats = inherit_weights(child, parent_state)
    assert stats.skipped["12.weight"] == "not in parent" and stats.unused == ["9.weight", "9.bias"]  # classifier moved
    assert stats.tensors_copied == 12  # both blocks (conv + BatchNorm's 4 buffers and 2 parameters each)


def test_a_dropout_only_child_computes_exactly_what_its_parent_does():
    space = MacroSpace()
    parent = build(space, MACRO, IMAGES, seed=0)
    child = build(space, {**MACRO, "dropout": 0.3}, IMAGES, seed=1)
    x = torch.randn(5, *IMAGES.input_shape)
    parent.eval(), child.eval()
    assert not torch.allclose(parent(x), child(x))
    inherit_weights(child, parent.state_dict())
    assert torch.equal(parent(x), child(x))


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_optimizer_state_follows_the_same_rule(optimizer):
    space = MacroSpace()
    hp = {"optimizer": optimizer, "lr": 1e-2, "weight_decay": 0.0, "momentum": 0.9}
    parent = build(space, MACRO, IMAGES, seed=0)
    opt = make_optimizer(parent, hp)
    for _ in range(3):
        loss = parent(torch.randn(4, *IMAGES.input_shape)).logsumexp(1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    names = optimizer_param_names(parent, opt)
    saved = opt.state_dict()
    child = build(space, {**MACRO, "kernel_1": 3}, IMAGES, seed=1)
    inherit_weights(child, parent.state_dict())
    child_opt = make_optimizer(child, hp)
    n = inherit_optimizer_state(child, child_opt, saved, names)
    assert n == len(names) - 1  # all but the re-shaped kernel
    state = {name: child_opt.state[p] for name, p in child.named_parameters()}
    parent_state = {name: opt.state[p] for name, p in parent.named_parameters()}
    key = "exp_avg" if optimizer == "adam" else "momentum_buffer"
    if optimizer == "adam":
        assert state["3.weight"] == {}  # starts afresh
    else:  # a zero buffer: what a fresh one is after its first step (fused SGD needs one for all or none)
        assert not state["3.weight"][key].any()
    assert torch.equal(state["0.weight"][key], parent_state["0.weight"][key])
    loss = child(torch.randn(4, *IMAGES.input_shape)).logsumexp(1).mean()
    loss.backward()
    child_opt.step()  # trains on from the inherited state
    assert child_opt.param_groups[0]["lr"] == 1e-2


def test_bad_input_is_named():
    model = torch.nn.Sequential(torch.nn.LazyLinear(3))
    with pytest.raises(ValueError, match="lazy"):
        inherit_weights(model, {})
    with pytest.raises(ValueError, match="not a tensor: \\['w'\\]"):
        inherit_weights(torch.nn.Linear(2, 2), {"w": 1.0})
    with pytest.raises(ValueError, match="must be a state_dict"):
        inherit_weights(torch.nn.Linear(2, 2), [1, 2])  # type: ignore[arg-type]
    stats = inherit_weights(torch.nn.Linear(2, 2), {"weight": torch.zeros(2, 2, dtype=torch.float64)})
    assert stats.skipped["weight"].startswith("dtype") and stats.skipped["bias"] == "not in parent"
