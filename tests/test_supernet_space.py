"""The supernet contract (nas.core.weight_sharing): a sub-network evaluated in the supernet gives the output of the
standalone network ``space.build(arch, task)`` with the supernet's sliced weights loaded, for every built-in space
that has one; a space without one is refused in one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nas.core.space import SearchSpace, Task
from nas.core.types import InvalidArchitecture
from nas.core.weight_sharing import Supernet
from nas.search_spaces.macro import MacroSpace
from nas.search_spaces.nb201 import NB201Space, from_op_code
from nas.search_spaces.toy import ToySpace

pytestmark = pytest.mark.usefixtures("one_thread")  # (tests/conftest.py)


CASES = [  # (space, task, batch shape)
    (MacroSpace(), Task((1, 8, 8), 10), (6, 1, 8, 8)),
    (MacroSpace(), Task((3, 9, 9), 4), (6, 3, 9, 9)),
    (MacroSpace(), Task((13,), 3), (6, 13)),
    (NB201Space(channels=8), Task((3, 8, 8), 10), (6, 3, 8, 8)),
    (NB201Space(channels=4, cells_per_stage=2), Task((1, 7, 7), 5), (6, 1, 7, 7)),
]


def archs(space: SearchSpace, n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = [space.sample(rng) for _ in range(n)]
    if isinstance(space, NB201Space):  # the corner cases: every edge none (zeros), all convolutions, all skips
        out += [from_op_code("000000"), from_op_code("333333"), from_op_code("111111"), from_op_code("200400")]
    return out


@pytest.mark.parametrize(("space", "task", "shape"), CASES, ids=lambda v: repr(v) if isinstance(v, Task) else None)
@pytest.mark.parametrize("mode", ["eval", "train"])
def test_a_path_of_the_supernet_computes_the_standalone_network_with_its_sliced_weights(space, task, shape, mode):
    torch.manual_seed(0)
    net = space.supernet(task)
    assert isinstance(net, Supernet)
    with torch.no_grad():  # weights far from any standalone initialisation, BN statistics far from 0 and 1
        for p in net.parameters():
            p.normal_(0.0, 0.3)
        for name, b in net.named_buffers():
            if "running_mean" in name:
                b.normal_(0.0, 1.0)
            elif "running_var" in name:
                b.uniform_(0.5, 2.0)
    x = torch.randn(*shape)
    for arch in archs(space, 25):
        if mode == "train" and "dropout" in arch:
            arch["dropout"] = 0.0  # (dropout masks are random: compared in eval mode)
        alone = space.build(arch, task)
        net.load_subnet(alone, arch)
        getattr(net, mode)()
        getattr(alone, mode)()
        with torch.no_grad():
            torch.testing.assert_close(net(x, arch), alone(x), rtol=1e-5, atol=1e-5)


def test_the_standalone_state_is_complete_and_cut_from_the_supernet():
    space, task = MacroSpace(), Task((1, 8, 8), 10)
    net = space.supernet(task)
    arch = {"depth": 2, "width_0": 32, "width_1": 16, "width_2": 64, "kernel_0": 3, "kernel_1": 5, "kernel_2": 3,
            "activation": "relu", "norm": "batch", "dropout": 0.0}
    state = net.subnet_state(arch)
    assert set(state) == set(space.build(arch, task).state_dict())  # strict: no tensor missing or extra
    assert state["0.weight"].shape == (32, 1, 3, 3)
    assert torch.equal(state["0.weight"], net.layers[0].weight[:32, :1, 1:4, 1:4])  # the centre of the 5x5 kernel
    assert state["3.weight"].data_ptr() == net.layers[1].weight.data_ptr()  # a view: nothing copied


def test_nb201_paths_share_everything_but_the_ops_they_pick():
    space, task = NB201Space(channels=4), Task((3, 8, 8), 10)
    net = space.supernet(task)
    a, b = from_op_code("334131"), from_op_code("334132")  # the last edge differs
    sa, sb = net.subnet_state(a), net.subnet_state(b)
    shared = set(sa) & set(sb)
    assert shared and all(sa[k].data_ptr() == sb[k].data_ptr() for k in shared)
    assert any("edge_3_2" in k for k in set(sb) - set(sa))  # b's 1x1 convolution on edge 3<-2


def test_training_a_path_moves_only_its_weights():
    space, task = MacroSpace(), Task((6,), 2)
    net = space.supernet(task)
    arch = {"depth": 1, "width_0": 16, "width_1": 16, "width_2": 16, "kernel_0": 3, "kernel_1": 3, "kernel_2": 3,
            "activation": "relu", "norm": "none", "dropout": 0.0}
    net(torch.randn(4, 6), arch).sum().backward()
    grad = net.layers[0].weight.grad
    assert grad is not None and grad[:16].abs().sum() > 0 and grad[16:].abs().sum() == 0
    assert net.layers[1].weight.grad is None  # a block beyond the path's depth


def test_a_path_is_activated_once_or_given_per_call():
    space, task = MacroSpace(), Task((6,), 2)
    net = space.supernet(task).eval()
    arch = space.sample(np.random.default_rng(1))
    x = torch.randn(3, 6)
    with pytest.raises(RuntimeError, match="no architecture is active"):
        net(x)
    assert torch.equal(net.activate(arch)(x), net(x, arch))
    with pytest.raises(InvalidArchitecture, match="decision 'width_0' has value 48"):
        net(x, {**arch, "width_0": 48})


def test_sandwich_extremes_keep_the_unordered_decisions():
    space = MacroSpace()
    net = space.supernet(Task((6,), 2))
    arch = {**space.sample(np.random.default_rng(2)), "activation": "silu", "norm": "batch"}
    largest, smallest = net.extremes(arch)
    assert (largest["depth"], largest["width_1"], largest["kernel_2"]) == (3, 64, 5)
    assert (smallest["depth"], smallest["width_1"], smallest["kernel_2"]) == (1, 16, 3)
    assert largest["activation"] == smallest["activation"] == "silu"
    assert NB201Space().supernet(Task((3, 8, 8), 10)).extremes(from_op_code("000000")) is None


def test_a_space_without_a_supernet_is_refused_in_one_line():
    with pytest.raises(ValueError) as e:
        ToySpace().supernet(Task((5,), 2))
    assert str(e.value) == "space 'toy' (ToySpace) has no supernet; spaces with one: macro, nb201"
    assert not ToySpace().has_supernet and MacroSpace().has_supernet and NB201Space().has_supernet
