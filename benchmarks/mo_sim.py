"""``nas bench strategies --objective val_acc:max --objective latency_ms:min``: multi-objective search on the
simulated NAS-Bench-201, the hypervolume of the front each method finds against simulated time.

What is searched: the NAS-Bench-201 protocol of :mod:`nas_benchmarks.nb201_strategies` (12,000 simulated seconds, one
worker, each query charged its 12-epoch training time) with two or more objectives from the shipped table:
``val_acc`` (the 12-epoch validation accuracy, a fraction), ``latency_ms`` (the cell's inference latency) and
``params`` (its parameter count), each ``metric:max`` or ``metric:min``.

What is measured: the front a run found (the non-dominated trials among those finished within the budget,
ranked on what the search saw) is judged with ``val_acc`` replaced by each member's 200-epoch validation
accuracy (mean over the table's seeds, what NAS-Bench-201 reports); its hypervolume (moocore, through
:mod:`nas.core.objectives`) is given as a percentage of the hypervolume of the table's TRUE front: all
15,625 cells enumerated and judged the same way. The reference point is :func:`nas.core.front.reference_point`
of every cell's judged values (each objective's worst less 10% of its range), one point for every method,
so the numbers compare. A second optimum row, "12-epoch front", is exhaustive search on the proxy: every
cell queried, the front on the 12-epoch accuracy, judged on the 200-epoch one (what a search that sees
only 12-epoch accuracy can reach at best). The table gives, per method, the mean over seeds with a 95%
confidence interval of the mean (1.96 standard errors), at a tenth of the budget and at its end; the
plot (matplotlib, log time axis) the mean curve with the same band.

Methods: multi-objective regularized evolution (population 10, tournament 3, as the single-objective
protocol), Optuna's NSGA-II (population 10) and multi-objective TPE, random search, and ParEGO's random
scalarization (:class:`nas.core.scalarize.Scalarized`) around the REINFORCE controller (``parego-rl``).

>>> out = run_mo("evolution", 0, ["val_acc:max", "latency_ms:min"], time_budget=3000)
>>> out.trials > 10, 50 < out.hv_pct <= 100, out.curve[-1][1] == out.hv_pct
(True, True, True)
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nas.core import objectives as core
from nas.core.front import reference_point
from nas.core.objectives import Objectives

#: method label -> (registered strategy, its options)
METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    "evolution": ("evolution", {"population": 10, "sample_size": 3}),
    "nsga2": ("optuna", {"sampler": "nsga2", "population": 10}),
    "tpe": ("optuna", {"sampler": "tpe"}),
    "random": ("random", {}),
    "parego-rl": ("rl", {}),
}
METRICS = ("val_acc", "latency_ms", "params")  # what the table answers for every cell


def make_executor(space: Any, *, seed: int, workers: int, objectives: Sequence[str],
                  search_dataset: str = "cifar10") -> Any:
    """The simulated executor on NAS-Bench-201 (:class:`nas.engine.tabular.nb201.NB201Fidelities`: each answer
    carries ``val_acc`` (12 epochs), ``latency_ms`` and ``params``) that scores ``objectives`` itself."""
    from nas.engine.simulated import SimulatedExecutor
    from nas.engine.tabular.nb201 import NB201Fidelities

    return SimulatedExecutor(space, NB201Fidelities(search_dataset), workers=workers, seed=seed,
                             objectives=list(objectives))


def check_objectives(specs: Sequence[str]) -> Objectives:
    obj = Objectives(specs)
    if len(obj) < 2:
        raise ValueError(f"a multi-objective benchmark needs two or more --objective, got {obj.to_list()}")
    for m in obj.metrics:
        if m not in METRICS:
            raise ValueError(f"objective metric {m!r} is not in the NAS-Bench-201 table; allowed: {', '.join(METRICS)}")
    return obj


@functools.lru_cache(maxsize=8)
def cell_scores(dataset: str, search_dataset: str, objectives: tuple[str, ...], judged: bool) -> np.ndarray:
    """Every cell's higher-is-better scores (cells x objectives): as the search sees them (``val_acc`` at 12
    epochs on ``search_dataset``) or judged (``val_acc`` at 200 epochs on ``dataset``)."""
    from nas.engine.tabular.nb201 import load_cell_costs, load_table

    table = load_table()
    params, latency = load_cell_costs()[search_dataset]
    acc = table.valid200[dataset] if judged else table.valid12[search_dataset]
    values = {"val_acc": acc / 100.0, "latency_ms": latency, "params": params}
    obj = Objectives(objectives)
    return np.column_stack([o.score(1.0) * values[o.metric] for o in obj]).astype(float)


def reference(dataset: str, search_dataset: str, objectives: tuple[str, ...]) -> list[float]:
    return reference_point(cell_scores(dataset, search_dataset, objectives, True))


@functools.lru_cache(maxsize=8)
def optimum(dataset: str, search_dataset: str, objectives: tuple[str, ...]) -> dict[str, float]:
    """The table's true front (judged) and exhaustive search on the 12-epoch proxy: sizes and hypervolumes."""
    judged = cell_scores(dataset, search_dataset, objectives, True)
    ref = reference(dataset, search_dataset, objectives)
    true_front = core.nondominated(judged)
    proxy_front = core.nondominated(cell_scores(dataset, search_dataset, objectives, False))
    return {"hv": core.hypervolume(judged[true_front], ref), "size": int(true_front.sum()),
            "proxy_hv": core.hypervolume(judged[proxy_front], ref), "proxy_size": int(proxy_front.sum())}


@dataclasses.dataclass
class MOOutcome:
    method: str
    seed: int
    trials: int = 0
    front: list[int] = dataclasses.field(default_factory=list)  # cell indices of the front found
    hv_pct: float = 0.0  # its judged hypervolume, % of the true front's
    strategy_seconds: float = 0.0
    curve: list[tuple[float, float]] = dataclasses.field(default_factory=list)  # (time, hv_pct) on change


def run_mo(method: str, seed: int, objectives: Sequence[str], *, dataset: str = "cifar10",
           search_dataset: str = "cifar10", time_budget: float = 12_000.0, workers: int = 1,
           options: Mapping[str, Any] | None = None) -> MOOutcome:
    """One seeded multi-objective run of ``method`` (a :data:`METHODS` label); only trials finished within
    ``time_budget`` count, as in :func:`nas_benchmarks.nb201_strategies.run_search`."""
    from nas.api import build_strategy
    from nas.engine.loop import SearchLoop
    from nas.search_spaces.nb201 import NB201Space

    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
    specs = tuple(check_objectives(objectives).to_list())
    name, defaults = METHODS[method]
    space = NB201Space()
    executor = make_executor(space, seed=seed, workers=workers, objectives=specs, search_dataset=search_dataset)
    strategy = build_strategy(name, space, seed, {**defaults, **(options or {})}, specs)
    loop = SearchLoop(strategy, executor, time_budget=time_budget, journal=None)
    loop.run()
    out = MOOutcome(method, seed, strategy_seconds=loop.strategy_seconds)
    done = sorted((r.end_time, int(r.metrics["index"])) for _, r in loop.results()
                  if r.ok and r.end_time is not None and r.end_time <= time_budget)
    out.trials = len(done)
    seen = cell_scores(dataset, search_dataset, specs, False)
    judged = cell_scores(dataset, search_dataset, specs, True)
    ref, best = reference(dataset, search_dataset, specs), optimum(dataset, search_dataset, specs)["hv"]
    front: list[int] = []
    for end, index in done:
        p = seen[index]
        if front and (seen[front] >= p).all(axis=1).any():
            continue  # weakly dominated by (or equal to) a member: the front stays
        front = [i for i in front if not (p >= seen[i]).all()] + [index]
        out.curve.append((float(end), 100.0 * core.hypervolume(judged[front], ref) / best))
    out.front = front
    out.hv_pct = out.curve[-1][1] if out.curve else 0.0
    return out


def _run(job: tuple[str, int, dict[str, Any]]) -> MOOutcome:
    method, seed, kwargs = job
    return run_mo(method, seed, **kwargs)


def run_all_mo(methods: Sequence[str], seeds: Sequence[int], objectives: Sequence[str], *, jobs: int = 1,
               options: Mapping[str, Mapping[str, Any]] | None = None, **kwargs: Any) -> list[MOOutcome]:
    """Every (method, seed), in ``jobs`` processes; results do not depend on ``jobs``."""
    from .nb201_strategies import pool_map

    opts = options or {}
    work = [(m, s, {**kwargs, "objectives": list(objectives), "options": dict(opts.get(m, {}))})
            for m in methods for s in seeds]
    return pool_map(_run, work, jobs)


def hv_at(outcome: MOOutcome, times: np.ndarray) -> np.ndarray:
    """The run's hypervolume (% of optimum) at each time (0 before its first result)."""
    if not outcome.curve:
        return np.zeros(len(times))
    t, v = np.array(outcome.curve).T
    idx = np.searchsorted(t, times, side="right") - 1
    return np.where(idx >= 0, v[np.clip(idx, 0, None)], 0.0)


def mean_ci(values: np.ndarray) -> tuple[float, float]:
    """The mean over runs and the half-width of its 95% confidence interval (1.96 standard errors)."""
    half = 1.96 * values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else float("nan")
    return float(values.mean()), float(half)

