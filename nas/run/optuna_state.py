"""An Optuna study and its sampler as snapshot data (no pickle): what :class:`~nas.strategies.optuna_sampler.
OptunaStrategy` needs to resume exactly, and nothing that can run code when read back.

- The sampler's random state: every ``LazyRandomState`` it holds (TPE, random, GP and NSGA-II keep one
  in ``_rng``; TPE and GP also in their fallback sampler; CMA-ES in ``_cma_rng``), as the MT19937 key
  array and position of its ``numpy.random.RandomState``.
- GPSampler's kernel-parameter cache (``_gprs_cache_list``: the starting point of the next kernel fit),
  as its three tensors per objective.
- For an in-memory study, its trials as arrays: state, value and the parameter of every decision (the
  parameters are option indices, so an int matrix with -1 where a trial has none). Trial attributes are
  not kept: TPE, GP and random set none, and CMA-ES keeps a pickle of its optimizer there, which a
  snapshot must never carry (with an in-memory study CMA-ES therefore restarts its search distribution
  after a resume; a journal storage keeps it).

>>> import optuna
>>> from optuna.distributions import IntDistribution
>>> optuna.logging.set_verbosity(optuna.logging.WARNING)
>>> dists = {"x": IntDistribution(0, 9)}
>>> a = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
>>> for _ in range(3):
...     a.tell(a.ask(dists), 1.0)
>>> state = {"trials": trials_state(a, dists), "rng": sampler_state(a.sampler)}
>>> b = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=2))
>>> load_trials(b, state["trials"], dists); load_sampler(b.sampler, state["rng"])
>>> a.ask(dists).params == b.ask(dists).params, len(b.trials)
(True, 4)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import optuna
import torch
from optuna.distributions import BaseDistribution
from optuna.samplers._lazy_random_state import LazyRandomState
from optuna.trial import TrialState

STATES = list(TrialState)  # stored by position: RUNNING, COMPLETE, PRUNED, FAIL, WAITING


def _random_states(obj: Any, prefix: str = "") -> Iterator[tuple[str, LazyRandomState]]:
    """Every LazyRandomState of a sampler and of the samplers it holds, by attribute path."""
    for attr, value in sorted(vars(obj).items()):
        if isinstance(value, LazyRandomState):
            yield prefix + attr, value
        elif isinstance(value, optuna.samplers.BaseSampler):
            yield from _random_states(value, f"{prefix}{attr}.")


def sampler_state(sampler: optuna.samplers.BaseSampler) -> dict[str, Any]:
    """The random states (and GPSampler's kernel cache) of ``sampler``, as arrays and numbers."""
    out: dict[str, Any] = {}
    for path, lazy in _random_states(sampler):
        name, keys, pos, has_gauss, gauss = lazy.rng.get_state()
        out[path] = {"keys": np.asarray(keys, dtype=np.uint32), "pos": int(pos),
                     "has_gauss": int(has_gauss), "gauss": float(gauss)}
    cache = getattr(sampler, "_gprs_cache_list", None)
    if cache is not None:
        out["gp_cache"] = [{"lengthscales": g.inverse_squared_lengthscales.detach().clone(),
                            "scale": g.kernel_scale.detach().clone(), "noise": g.noise_var.detach().clone()}
                           for g in cache]
    return out


def load_sampler(sampler: optuna.samplers.BaseSampler, state: Mapping[str, Any]) -> None:
    """Restore what :func:`sampler_state` took; a state of another sampler kind is a ValueError."""
    lazies = dict(_random_states(sampler))
    saved = {k for k in state if k != "gp_cache"}
    if saved != set(lazies):
        raise ValueError(f"the snapshot's sampler random states {sorted(saved)} do not match this sampler's "
                         f"{sorted(lazies)}")
    for path, lazy in lazies.items():
        s = state[path]
        lazy.rng.set_state(("MT19937", np.asarray(s["keys"], dtype=np.uint32), int(s["pos"]),
                            int(s["has_gauss"]), float(s["gauss"])))
    if "gp_cache" in state and hasattr(sampler, "_gprs_cache_list"):
        from optuna._gp.gp import GPRegressor

        def rebuild(c: Mapping[str, torch.Tensor]) -> GPRegressor:
            d = len(c["lengthscales"])  # only the kernel parameters of a cached regressor are read
            return GPRegressor(torch.zeros(d, dtype=torch.bool), torch.zeros(1, d, dtype=torch.float64),
                               torch.zeros(1, dtype=torch.float64), c["lengthscales"], c["scale"], c["noise"])

        sampler._gprs_cache_list = [rebuild(c) for c in state["gp_cache"]]


def trials_state(study: optuna.Study, distributions: Mapping[str, BaseDistribution]) -> dict[str, Any]:
    """The trials of a single-objective ``study`` whose parameters are ints (option indices), as arrays."""
    trials = study.get_trials(deepcopy=False)
    names = list(distributions)
    params = np.full((len(trials), len(names)), -1, dtype=np.int64)
    values = np.full(len(trials), np.nan)
    states = np.zeros(len(trials), dtype=np.int8)
    for i, t in enumerate(trials):
        if t.number != i:
            raise ValueError(f"optuna trial numbers are not contiguous: trial {i} has number {t.number}")
        states[i] = STATES.index(t.state)
        if t.value is not None:
            values[i] = t.value
        for j, name in enumerate(names):
            if name in t.params:
                params[i, j] = int(t.params[name])
    return {"names": names, "params": params, "values": values, "states": states}


def load_trials(study: optuna.Study, state: Mapping[str, Any], distributions: Mapping[str, BaseDistribution]
                ) -> None:
    """Add the trials :func:`trials_state` took to an empty ``study``, with the same numbers."""
    names = list(state["names"])
    if names != list(distributions):
        raise ValueError(f"the snapshot's optuna parameters {names} do not match the space's {list(distributions)}")
    if study.get_trials(deepcopy=False):
        raise ValueError("optuna trials can only be restored into an empty study")
    params, values, states = state["params"], state["values"], state["states"]
    frozen = []
    for row, value, s in zip(params.tolist(), values.tolist(), states.tolist()):
        if not 0 <= s < len(STATES):
            raise ValueError(f"unknown optuna trial state {s}")
        p = {n: v for n, v in zip(names, row) if v >= 0}
        frozen.append(optuna.trial.create_trial(
            state=STATES[s], params=p, distributions={n: distributions[n] for n in p},
            value=None if STATES[s] != TrialState.COMPLETE else value))
    study.add_trials(frozen)
