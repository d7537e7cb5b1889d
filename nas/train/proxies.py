"""Zero-cost proxies: scores of an untrained network, from one minibatch (or none), that rank architectures.

Each is written from its paper (no code copied) and computed on the model's device:

- ``synflow`` (Tanaka et al. 2020, "Pruning neural networks without any data by iteratively conserving synaptic
  flow", NeurIPS, eq. 2; as a NAS proxy: Abdelfattah et al. 2021, "Zero-Cost Proxies for Lightweight NAS", ICLR):
  every parameter replaced by its absolute value, the network in evaluation mode (batch norm an affine identity at
  initialisation) and double precision, one all-ones input; R = the sum of the outputs; the score is
  sum |theta * dR/dtheta| over the weights of convolutions and linear layers. It sees no data.
- ``snip`` (Lee et al. 2019, "SNIP: Single-shot Network Pruning based on Connection Sensitivity", ICLR, eq. 6):
  sum |theta * dL/dtheta| of the cross-entropy loss L on one labelled minibatch, same weights.
- ``grad_norm`` (Abdelfattah et al. 2021, section 3): the sum over those layers of the Euclidean norm of dL/dtheta.
- ``jacob_cov`` (Mellor et al. 2020, "Neural Architecture Search without Training", arXiv v1, section 3): the
  Jacobians of the summed outputs with respect to each input of a minibatch, their correlation matrix' eigenvalues
  l, and -sum(log(l + k) + 1 / (l + k)), k = 1e-5. Labels are not used.
- ``naswot`` (Mellor et al. 2021, the ICML version, eq. 2): the binary code of which ReLUs are active for each
  input, the kernel K[i, j] = (units) - Hamming(c_i, c_j), and log |det K|. Labels are not used. A unit is active
  where its pre-activation is > 0: for a ReLU that is the paper's code, for the other rectifier-like units
  (:data:`RECTIFIERS`: GELU, SiLU, LeakyReLU, ELU, Hardswish, Mish, ...) its natural generalisation (a GELU or SiLU
  network scored -inf, as if it passed nothing through: ranked last, screened out). Units are found as modules
  (a forward pre-hook on each): an activation called as a function in a custom ``forward`` (``F.relu(x)``) is not
  seen, and a network with no such module scores -inf.
- ``params``: the parameter count, the baseline a proxy must beat (it correlates 0.735 with CIFAR-100 accuracy
  on NAS-Bench-201, Abdelfattah et al. 2021, Table 1).

Higher is better for every one. :func:`compute` scores one model; :class:`scoring` is a training function that
scores instead of training (``nas.search(..., train=scoring("synflow"), objectives=["synflow"])`` ranks a space's
candidates on the workers, in parallel; on the command line :func:`score`: ``--train-function
nas.train.proxies:score --objective synflow``); :class:`screened` scores before training and makes a candidate below
a threshold an INFEASIBLE trial that trained nothing (a cheap pre-screen; on the command line the constraint
``--proxy-screen synflow:1e10``, :attr:`nas.train.settings.TrainSettings.proxy_screen`); :func:`score_archs` scores
a list of architectures in this process (the benches; a strategy's warm-up, :func:`nas.strategies.warmup.warm_up`).

>>> import torch
>>> from nas.search_spaces.nb201 import NB201Space, from_op_code
>>> from nas.core.space import Task
>>> torch.manual_seed(0)  # doctest: +ELLIPSIS
<torch._C.Generator object at ...>
>>> x, y = torch.randn(16, 3, 8, 8), torch.randint(0, 10, (16,))
>>> space, task = NB201Space(channels=4), Task((3, 8, 8), 10)
>>> good, bad = (space.build(from_op_code(c), task) for c in ("334131", "000000"))
>>> s_good, s_bad = compute(good, x, y), compute(bad, x, y)
>>> sorted(s_good) == sorted(PROXIES), s_good["synflow"] > s_bad["synflow"], s_good["params"] > s_bad["params"]
(True, True, True)
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from nas.core.types import Arch, FailureKind
from nas.train.constraints import PROXY_NAMES
from nas.train.context import TrialContext, TrialFailure

PROXIES = PROXY_NAMES
NEEDS_DATA = frozenset({"snip", "grad_norm", "jacob_cov", "naswot"})
#: the elementwise activation modules whose units naswot codes (active: pre-activation > 0); saturating gates
#: (Sigmoid, Tanh, Hardtanh, Hardsigmoid: a squeeze-excite's scale) switch no linear region and are left out
RECTIFIERS: tuple[type[nn.Module], ...] = (
    nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.PReLU, nn.RReLU, nn.ELU, nn.CELU, nn.SELU, nn.GELU, nn.SiLU, nn.Mish,
    nn.Hardswish, nn.Softplus)


def check_names(names: Iterable[str]) -> list[str]:
    """``names`` as a list, or a ValueError naming the unknown one and the known."""
    out = list(names)
    for name in out:
        if name not in PROXIES:
            raise ValueError(f"unknown proxy {name!r}; known: {', '.join(PROXIES)}")
    if not out:
        raise ValueError(f"no proxy named; known: {', '.join(PROXIES)}")
    return out


def _weights(model: nn.Module) -> list[torch.Tensor]:
    """The weights of every convolution and linear layer (where the papers sum)."""
    return [m.weight for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Conv1d, nn.Linear))
            and m.weight is not None]


def synflow(model: nn.Module, input_shape: Sequence[int]) -> float:
    """Synaptic flow of a copy of ``model`` (the original is left untouched)."""
    net = copy.deepcopy(model).double().eval()
    with torch.no_grad():
        for p in net.parameters():
            p.abs_()
    weights = _weights(net)
    device = weights[0].device if weights else torch.device("cpu")
    net.zero_grad()
    net(torch.ones(1, *input_shape, dtype=torch.float64, device=device)).sum().backward()
    with torch.no_grad():
        return float(sum((w * w.grad).abs().sum() for w in weights if w.grad is not None))


def _loss_gradients(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(weight, dL/dweight) of every convolution and linear layer of a copy of ``model`` in training mode, L the
    cross-entropy of the minibatch (one backward pass, shared by snip and grad_norm)."""
    net = copy.deepcopy(model).train()
    weights = _weights(net)
    net.zero_grad()
    nn.functional.cross_entropy(net(x), y).backward()
    return [(w.detach(), w.grad.detach()) for w in weights if w.grad is not None]


def _sum(values: Iterable[torch.Tensor]) -> float:
    return float(sum((v.double() for v in values), torch.zeros((), dtype=torch.float64)))


def snip(grads: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """From :func:`_loss_gradients`."""
    return _sum((w * g).abs().sum() for w, g in grads)


def grad_norm(grads: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """From :func:`_loss_gradients`."""
    return _sum(g.norm() for _, g in grads)


def _activations(model: nn.Module, x: torch.Tensor) -> tuple[np.ndarray | None, torch.Tensor | None]:
    """One forward and backward pass of a copy of ``model`` in training mode: the Jacobian of the summed outputs
    with respect to each input (rows; None where the output does not depend on the input) and the binary codes of
    the units of its :data:`RECTIFIERS` (rows, 1 where the pre-activation is > 0; None where it has none), shared by
    jacob_cov and naswot. (ReLUs only were coded: a GELU or SiLU network had no code and scored -inf.)"""
    net = copy.deepcopy(model).train()
    codes: list[torch.Tensor] = []

    def hook(_module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        # before the forward: an in-place activation has not yet overwritten its pre-activation
        codes.append((inputs[0].detach().reshape(len(x), -1) > 0).double())

    handles = [m.register_forward_pre_hook(hook) for m in net.modules() if isinstance(m, RECTIFIERS)]
    inputs = x.detach().clone().requires_grad_(True)
    try:
        out = net(inputs).sum()
    finally:
        for h in handles:
            h.remove()
    jac = None
    if out.requires_grad:
        out.backward()
        if inputs.grad is not None:
            jac = inputs.grad.reshape(len(x), -1).double().cpu().numpy()
    return jac, torch.cat(codes, dim=1) if codes else None


def jacob_cov(jac: np.ndarray | None) -> float:
    """From :func:`_activations`."""
    if jac is None:
        return -math.inf
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = np.corrcoef(jac)
    if not np.all(np.isfinite(corr)):
        return -math.inf  # constant Jacobians (a cell that passes nothing through)
    eig = np.linalg.eigvalsh(corr)
    k = 1e-5
    return float(-np.sum(np.log(eig + k) + 1.0 / (eig + k)))


def naswot(codes: torch.Tensor | None) -> float:
    """From :func:`_activations`."""
    if codes is None:
        return -math.inf
    kernel = codes @ codes.T + (1 - codes) @ (1 - codes).T  # units minus the Hamming distance
    sign, logdet = torch.linalg.slogdet(kernel)
    return float(logdet) if float(sign) > 0 else -math.inf


def compute(model: nn.Module, x: torch.Tensor | None = None, y: torch.Tensor | None = None, *,
            names: Iterable[str] = PROXIES, input_shape: Sequence[int] | None = None) -> dict[str, float]:
    """The proxies ``names`` of ``model`` (on its device; left untouched) with the minibatch ``x``, ``y`` on that
    device (needed by all but synflow and params; ``input_shape`` stands in for ``x``'s there)."""
    wanted = check_names(names)
    if x is None and NEEDS_DATA.intersection(wanted):
        raise ValueError(f"proxies {sorted(NEEDS_DATA.intersection(wanted))} need a minibatch")
    shape = tuple(x.shape[1:]) if x is not None else tuple(input_shape or ())
    out: dict[str, float] = {}
    if "params" in wanted:
        out["params"] = float(sum(p.numel() for p in model.parameters()))
    if "synflow" in wanted:
        out["synflow"] = synflow(model, shape)
    if {"snip", "grad_norm"}.intersection(wanted):
        if y is None:
            raise ValueError("proxies snip and grad_norm need labels")
        grads = _loss_gradients(model, x, y)  # type: ignore[arg-type]
        out.update(snip=snip(grads), grad_norm=grad_norm(grads))
    if {"jacob_cov", "naswot"}.intersection(wanted):
        jac, codes = _activations(model, x)  # type: ignore[arg-type]
        out.update(jacob_cov=jacob_cov(jac), naswot=naswot(codes))
    return {name: out[name] for name in wanted}


def _first_batch(ctx: TrialContext, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    for x, y in ctx.data.train_batches(batch_size, None):
        return x, y
    raise TrialFailure(FailureKind.ERROR, "the worker's data has no training batch to score proxies on")


def _finite(values: dict[str, float]) -> dict[str, float]:
    """Non-finite proxy values (a degenerate cell) as the lowest finite float, so they rank last, not fail."""
    return {k: (v if math.isfinite(v) else -1e300) for k, v in values.items()}


class scoring:  # noqa: N801 - used as a function: train=scoring("synflow")
    """A training function that trains nothing: it reports the proxies ``names`` of the built model, computed on
    one minibatch of ``batch_size`` from the worker's data on its device, as metrics at epoch 1."""

    def __init__(self, *names: str, batch_size: int = 64) -> None:
        self.names, self.batch_size = check_names(names or ("synflow",)), int(batch_size)

    def __call__(self, ctx: TrialContext) -> None:
        x, y = _first_batch(ctx, self.batch_size)
        ctx.report(epoch=1, **_finite(compute(ctx.model, x, y, names=self.names)))

    def __repr__(self) -> str:
        return f"scoring({', '.join(map(repr, self.names))})"


class screened:  # noqa: N801 - used as a function: train=screened(fit, "synflow", minimum=1e20)
    """A training function that scores proxy ``name`` first (on a copy of the model: the weights it trains are the
    untouched initialisation) and makes a candidate scoring below ``minimum`` an INFEASIBLE trial that trained
    nothing; the others train with ``train`` (e.g. :func:`nas.train.fit.fit`), the score among their metrics."""

    def __init__(self, train: Callable[[TrialContext], Any], name: str, *, minimum: float,
                 batch_size: int = 64) -> None:
        self.train, self.name, self.minimum = train, check_names([name])[0], float(minimum)
        self.batch_size = int(batch_size)

    def __call__(self, ctx: TrialContext) -> Any:
        if ctx.model is None or ctx.data is None:
            raise TrialFailure(FailureKind.ERROR, f"a screen by {self.name} needs a model and data (a space that "
                               "builds models, a dataset)")
        if ctx.world_size > 1 and self.name in NEEDS_DATA:  # each rank's batch differs: ranks could disagree
            raise TrialFailure(FailureKind.ERROR, f"a screen by {self.name} on a gang of {ctx.world_size} would "
                               "see a different batch on each rank; screen by synflow or params there")
        x, y = _first_batch(ctx, self.batch_size if self.name in NEEDS_DATA else 1)
        value = compute(ctx.model, x, y, names=[self.name])[self.name]
        if not value >= self.minimum:
            raise TrialFailure(FailureKind.INFEASIBLE, f"{self.name} {value:.4g} < minimum {self.minimum:.4g}",
                               {self.name: value})
        ctx.costs[self.name] = value  # among the result's metrics
        return self.train(ctx)


def score(ctx: TrialContext) -> None:
    """The training function ``nas search --train-function nas.train.proxies:score --objective synflow``: it trains
    nothing and reports each proxy the run's objectives name (several for a multi-objective ranking), computed on
    one minibatch of the run's ``batch_size`` from the worker's data, on its device. On the Ray executor every
    worker scores its own candidates: the proxies of a space are ranked in parallel."""
    names = [m for m in ctx.objectives.metrics if m in PROXIES]
    if not names:
        raise TrialFailure(FailureKind.ERROR, f"nas.train.proxies:score reports proxies, but no objective "
                           f"({', '.join(ctx.objectives.metrics)}) is one of {', '.join(PROXIES)}")
    scoring(*names, batch_size=int(ctx.hparams.get("batch_size", 64)))(ctx)


def minibatch(x: np.ndarray, y: np.ndarray, size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``size`` examples of ``x`` and ``y`` (a seeded choice) prepared as a search's workers feed them to a model, to
    its ``--proxy-screen`` and to ``nas.train.proxies:score`` (:meth:`nas.train.feed.DeviceFeed.prepare`: uint8
    images normalised per channel with ``x``'s mean and std): what ``nas proxies`` and a strategy's warm-up score.

    >>> from nas.train.synthetic import synthetic_images
    >>> xb, yb = minibatch(*synthetic_images(64, seed=0), 32, seed=0)
    >>> tuple(xb.shape), xb.dtype, abs(float(xb.mean())) < 0.2, yb.dtype
    ((32, 3, 32, 32), torch.float32, True, torch.int64)
    """
    from nas.train.feed import DeviceFeed

    x, y = np.asarray(x), np.asarray(y)
    feed = DeviceFeed(x, y, x[:0], y[:0], torch.device("cpu"))
    pick = torch.as_tensor(np.random.default_rng(seed).permutation(len(x))[:size])
    xb, yb = next(feed.gather([pick]))
    return xb.float(), yb.long()


def cifar_like_batch(size: int = 32, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``size`` generated CIFAR-shaped images (32x32 RGB, 10 classes: :mod:`nas.train.synthetic`; nothing is
    downloaded), normalised: what the proxies that need data see of a cell answered from NAS-Bench-201's table
    (``nas bench proxies``, a simulated search's warm-up)."""
    from nas.train.synthetic import synthetic_images

    return minibatch(*synthetic_images(size, classes=10, size=32, seed=seed), size, seed)


def score_archs(space: Any, archs: Sequence[Arch], task: Any, *, names: Iterable[str] = ("synflow",),
                x: torch.Tensor | None = None, y: torch.Tensor | None = None, seed: int = 0,
                device: str | torch.device = "cpu") -> dict[str, list[float]]:
    """Each proxy of each architecture of ``space`` built for ``task`` (a :class:`nas.core.space.Task`), in this
    process on ``device``, each model initialised from ``seed`` + its index; NaN where one fails to build or score."""
    wanted = check_names(names)
    out: dict[str, list[float]] = {n: [] for n in wanted}
    if x is not None:
        x = x.to(device)
        y = None if y is None else y.to(device)
    for i, arch in enumerate(archs):
        torch.manual_seed(seed + i)
        try:
            values = compute(space.build(arch, task).to(device), x, y, names=wanted, input_shape=task.input_shape)
        except (RuntimeError, ValueError):
            values = {n: math.nan for n in wanted}
        for n in wanted:
            out[n].append(values[n])
    return out


def rank_against(space: Any, archs: Sequence[Arch], scores: Sequence[float], task: Any, *,
                 names: Iterable[str] = PROXIES, x: torch.Tensor | None = None, y: torch.Tensor | None = None,
                 seed: int = 0, device: str | torch.device = "cpu") -> dict[str, tuple[float, float]]:
    """Spearman's rho and Kendall's tau (scipy) of each proxy of ``archs`` against their ``scores`` (a run's finished
    trials, say): what ``nas proxies RUN`` prints. A proxy that failed on a cell ranks it last."""
    from scipy.stats import kendalltau, spearmanr

    values = score_archs(space, archs, task, names=names, x=x, y=y, seed=seed, device=device)
    out = {}
    for name, column in values.items():
        v = np.array(column, dtype=float)
        bad = ~np.isfinite(v)
        v[bad] = (v[~bad].min() if (~bad).any() else 0.0) - 1.0
        out[name] = (float(spearmanr(v, scores)[0]), float(kendalltau(v, scores)[0]))
    return out


__all__ = ["NEEDS_DATA", "PROXIES", "check_names", "cifar_like_batch", "compute", "grad_norm", "jacob_cov", "minibatch",
           "naswot", "rank_against", "score", "score_archs", "screened", "scoring", "snip", "synflow"]
