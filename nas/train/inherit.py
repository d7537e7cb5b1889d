"""Weight inheritance: a child network starts from its parent's trained weights wherever its mutation left a
tensor unchanged (Real et al. 2017, "Large-Scale Evolution of Image Classifiers", section 3: "children inherit
the parent's weights whenever possible").

The rule, in one place, for every strategy. A trial that carries ``inherit_from`` (a finished trial whose
checkpoint was kept) is built fresh, then every parameter and buffer tensor of the new model whose *name* and
*shape* (and dtype) are the same in the parent's checkpoint ``"model"`` state_dict is copied from it; every
other tensor keeps its fresh initialisation. Nothing else about the trial changes: it trains its own ``epochs``
with its own hyperparameters from epoch 0 (a warm start of the weights, not a resumed run; resuming the same
architecture is ``checkpoint_from``). Any strategy whose trials carry a parent uses this rule by setting
``inherit_from`` (evolution with ``inherit=true``, PBT when its explore step changes the architecture); no
strategy has code of its own for it.

What survives a mutation follows from the names a space's ``build`` gives its modules:

- NAS-Bench-201 (:mod:`nas.search_spaces.nb201`): a cell's edge modules are keyed by the edge's name, so a
  one-edge mutation keeps every tensor of every other edge, the stem, the reduction blocks and the classifier;
  of the mutated edge only tensors of unchanged shape survive (a 3x3 -> 1x1 convolution loses its kernel
  but keeps the shape-compatible BatchNorm after it, as "whenever possible" reads).
- The macro space (:mod:`nas.search_spaces.macro`): every layer whose shape matches (a width change resets the
  layers it touches, a kernel change its convolution, an activation or dropout change nothing).

Optimizer state (Adam's moments, SGD's momentum) follows the same rule per parameter with
:func:`inherit_optimizer_state`, given the parent's optimizer state_dict and the parameter names in its
order (:func:`optimizer_param_names` of the parent, stored in its checkpoint).

>>> import torch
>>> parent = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
>>> child = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 5))
>>> stats = inherit_weights(child, parent.state_dict())
>>> stats.tensors_copied, stats.tensors_total, stats.params_copied, stats.params_total
(2, 4, 40, 85)
>>> stats.skipped["2.weight"]
'shape (5, 8) != parent (3, 8)'
>>> torch.equal(child[0].weight, parent[0].weight)
True
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Mapping, Sequence
from typing import Any

import torch


@dataclasses.dataclass
class InheritStats:
    """What :func:`inherit_weights` copied. ``params_*`` count parameter elements (as a model's ``params``
    metric does; buffers such as BatchNorm's running statistics are counted in ``tensors_*`` only);
    ``skipped``: the child's tensors left as initialised, name -> why; ``unused``: the parent's tensors
    the child has no place for."""

    tensors_copied: int = 0
    tensors_total: int = 0
    params_copied: int = 0
    params_total: int = 0
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)
    unused: list[str] = dataclasses.field(default_factory=list)

    @property
    def fraction(self) -> float:
        """The share of the child's parameters (elements) that were inherited."""
        return self.params_copied / self.params_total if self.params_total else 0.0

    def metrics(self, parent: int | None = None) -> dict[str, Any]:
        """The figures a trial records (journaled with its result): ``inherited_params`` and friends."""
        out: dict[str, Any] = {"inherited_params": self.params_copied, "inherited_tensors": self.tensors_copied,
                               "inherited_fraction": round(self.fraction, 6)}
        if parent is not None:
            out["inherited_from"] = parent
        return out


def inherit_weights(model: torch.nn.Module, parent_state: Mapping[str, Any]) -> InheritStats:
    """Copy into ``model`` (built and materialised: no lazy parameters left) every tensor of ``parent_state``
    (a checkpoint's ``"model"`` state_dict) whose name, shape and dtype are unchanged; the rest stays as
    initialised. Copies go to the model's device. Returns what was copied and what was not, and why."""
    if not isinstance(parent_state, Mapping):
        raise ValueError(f"parent_state must be a state_dict (a mapping of name -> tensor), "
                         f"got {type(parent_state).__name__}")
    bad = [k for k, v in parent_state.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise ValueError(f"parent_state must map names to tensors; not a tensor: {bad[:3]}")
    if any(torch.nn.parameter.is_lazy(p) for p in model.parameters()):
        raise ValueError("the model still has lazy (uninitialised) parameters: run a forward pass on a probe "
                         "input before inheriting weights")
    param_names = {name for name, _ in model.named_parameters()}
    stats = InheritStats()
    own = model.state_dict()  # tensors sharing storage with the model's parameters and buffers
    with torch.no_grad():
        for name, tensor in own.items():
            is_param = name in param_names
            stats.tensors_total += 1
            stats.params_total += tensor.numel() if is_param else 0
            src = parent_state.get(name)
            if src is None:
                stats.skipped[name] = "not in parent"
            elif src.shape != tensor.shape:
                stats.skipped[name] = f"shape {tuple(tensor.shape)} != parent {tuple(src.shape)}"
            elif src.dtype != tensor.dtype:
                stats.skipped[name] = f"dtype {tensor.dtype} != parent {src.dtype}"
            else:
                tensor.copy_(src)
                stats.tensors_copied += 1
                stats.params_copied += tensor.numel() if is_param else 0
    stats.unused = [k for k in parent_state if k not in own]
    return stats


def optimizer_param_names(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """The names of ``optimizer``'s parameters in its state_dict's index order (what a checkpoint stores as
    ``"optimizer_param_names"`` so that a child can match optimizer state by name)."""
    names = {id(p): n for n, p in model.named_parameters()}
    try:
        return [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
    except KeyError:
        raise ValueError("the optimizer holds a parameter that is not the model's") from None


def inherit_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                            parent_optimizer: Mapping[str, Any], parent_param_names: Sequence[str]) -> int:
    """Give ``optimizer`` (the child's, of the same kind as the parent's) the parent's per-parameter state
    (Adam's moments and step, SGD's momentum) for every parameter whose name and shape are unchanged; the
    others start as a fresh optimizer's (SGD: a zero momentum buffer, the same thing). The child's
    hyperparameters (learning rate, ...) stay its own. Returns the number of parameters whose state was
    inherited."""
    state = parent_optimizer.get("state") if isinstance(parent_optimizer, Mapping) else None
    groups = parent_optimizer.get("param_groups") if isinstance(parent_optimizer, Mapping) else None
    if not isinstance(state, Mapping) or not isinstance(groups, list):
        raise ValueError("parent_optimizer must be an optimizer state_dict with 'state' and 'param_groups'")
    order = [i for g in groups for i in g["params"]]
    if len(order) != len(parent_param_names):
        raise ValueError(f"the parent's optimizer has {len(order)} parameters but {len(parent_param_names)} "
                         "parameter names were given")
    by_name = {name: state[i] for name, i in zip(parent_param_names, order) if i in state}
    params = dict(model.named_parameters())
    mine = optimizer.state_dict()
    new_state: dict[int, Any] = {}
    indexed = list(zip([i for g in mine["param_groups"] for i in g["params"]], optimizer_param_names(model, optimizer)))
    for i, name in indexed:
        src = by_name.get(name)
        if src is None:
            continue
        shape = params[name].shape
        tensors = [v for k, v in src.items() if isinstance(v, torch.Tensor) and k != "step"]
        if tensors and all(v.shape == shape for v in tensors):
            new_state[i] = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in src.items()}
    inherited = len(new_state)
    if isinstance(optimizer, torch.optim.SGD) and any("momentum_buffer" in s for s in new_state.values()):
        # SGD's fused step needs a buffer for every parameter or none; a zero buffer is what a fresh one is
        # after its first step (buf = grad, without dampening)
        for i, name in indexed:
            new_state.setdefault(i, {"momentum_buffer": torch.zeros_like(params[name])})
    optimizer.load_state_dict({"state": new_state, "param_groups": mine["param_groups"]})
    return inherited


def inherit_into(model: torch.nn.Module, data: bytes, device: torch.device,
                 parent: int | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Copy into ``model`` every tensor of the checkpoint ``data`` whose name and shape it shares: the metrics
    that record it, and the parent's state (its optimizer state, for the training function to take what fits)."""
    state = torch.load(io.BytesIO(data), map_location=device, weights_only=True)
    stats = inherit_weights(model, state["model"])
    return stats.metrics(parent=parent), state
