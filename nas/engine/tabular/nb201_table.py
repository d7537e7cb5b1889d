"""The NAS-Bench-201 table (Dong & Yang, "NAS-Bench-201", ICLR 2020) shipped with the package, and the
benchmark protocol that answers a query from it.

``nas/engine/tabular/data/nb201.csv`` holds all 15,625 cells (its README and licences are beside it): for
CIFAR-10 (the ``cifar10-valid`` split), CIFAR-100 and ImageNet16-120, the 12-epoch validation accuracy
(mean over seeds), the 200-epoch validation accuracy of each seed, and the 200-epoch training time.
:func:`load_table` reads it once per process (about 0.1 s) and caches it.

The protocol (:class:`NB201Benchmark`), as in the paper's searches with a time budget: a query of a
cell returns its 12-epoch validation accuracy as the reward and costs its 12-epoch training time,
0.06 x the 200-epoch training time; the cell a search ends with is judged by its 200-epoch
validation accuracy, the mean over the seeds of the table (what the paper reports).
:class:`NB201Fidelities` answers both schedules (12 and 200 epochs) as two fidelities; one per dataset is
registered in :data:`nas.core.registry.tables` as ``nb201-cifar10``, ``nb201-cifar100`` and
``nb201-imagenet16``, the names ``SimulatedExecutor.from_config`` resolves.

>>> bench = NB201Benchmark("cifar10")
>>> from nas.search_spaces.nb201 import from_op_code
>>> reward, seconds, metrics = bench.query(from_op_code("334131"))
>>> round(reward, 4), round(seconds, 2), round(metrics["valid_acc_200"], 2)
(0.8283, 130.18, 90.77)
>>> load_table().best("cifar10")
(6111, 91.60666666666667)
>>> from nas.core.registry import tables
>>> tables.names(), tables.get("nb201-cifar100")()
(['nb201-cifar10', 'nb201-cifar100', 'nb201-imagenet16'], NB201Fidelities(dataset='cifar100'))
"""

from __future__ import annotations

import dataclasses
import functools
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from nas.core.registry import register_table
from nas.core.types import Arch
from nas.search_spaces.nb201 import EDGE_NAMES, OPS, NB201Space

#: dataset name -> column prefix in the csv
DATASETS = {"cifar10": "c10", "cifar100": "c100", "imagenet16": "in16"}
EPOCHS_FRACTION_12 = 12 / 200  # the 12-epoch schedule trains 0.06 of the 200-epoch time


def data_path() -> Path:
    """The csv inside the installed package."""
    return Path(str(resources.files("nas.engine.tabular") / "data" / "nb201.csv"))


def check_dataset(name: str) -> str:
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
    return name


_OP_INDEX = {op: str(i) for i, op in enumerate(OPS)}


def arch_code(arch: Arch) -> str:
    """The 6-digit op code (the csv's ``op_code``) of a cell; InvalidArchitecture if it is not one."""
    try:
        return "".join(_OP_INDEX[arch[name]] for name in EDGE_NAMES)  # type: ignore[index]
    except (KeyError, TypeError):
        NB201Space().validate(arch)  # raises with the decision and allowed options named
        raise


@dataclasses.dataclass(frozen=True)
class NB201Table:
    """The table as arrays, row i = NAS-Bench-201 index i. Per dataset: ``valid12`` (%), ``valid200``
    (%, mean over seeds), ``seeds200`` (%, one list per cell), ``time200`` (seconds)."""

    arch_str: tuple[str, ...]
    index_of: dict[str, int]  # op code -> row
    valid12: dict[str, np.ndarray]
    valid200: dict[str, np.ndarray]
    seeds200: dict[str, tuple[tuple[float, ...], ...]]
    time200: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.arch_str)

    def row(self, arch: Arch) -> int:
        return self.index_of[arch_code(arch)]

    def best(self, dataset: str) -> tuple[int, float]:
        """The index and 200-epoch validation accuracy (mean over seeds) of the best cell."""
        v = self.valid200[check_dataset(dataset)]
        i = int(np.argmax(v))
        return i, float(v[i])


@functools.lru_cache(maxsize=4)
def load_table(path: str | None = None) -> NB201Table:
    """Read the csv (the shipped one unless ``path``) once per process."""
    import pandas as pd

    df = pd.read_csv(path or data_path(), dtype={"op_code": str})
    if list(df["index"]) != list(range(len(df))):
        raise ValueError(f"{path or data_path()}: rows are not NAS-Bench-201 indices 0..{len(df) - 1}")
    valid12, valid200, seeds200, time200 = {}, {}, {}, {}
    for name, p in DATASETS.items():
        valid12[name] = df[f"{p}_valid_acc_12"].to_numpy(float)
        seeds = tuple(tuple(float(x) for x in s.split(";")) for s in df[f"{p}_valid_acc_200_seeds"])
        seeds200[name] = seeds
        valid200[name] = np.array([sum(s) / len(s) for s in seeds])
        time200[name] = df[f"{p}_train_time_200_s"].to_numpy(float)
    return NB201Table(arch_str=tuple(df["arch_str"]), index_of=dict(zip(df["op_code"], range(len(df)))),
                      valid12=valid12, valid200=valid200, seeds200=seeds200, time200=time200)


_VALID200_KEYS = tuple((name, f"valid_acc_200_{name}") for name in DATASETS)


class NB201Benchmark:
    """Answers a query of a cell under the NAS-Bench-201 protocol, searching on ``dataset``.

    ``query(arch)`` returns ``(reward, seconds, metrics)``: the 12-epoch validation accuracy as a
    fraction (higher is better, as every score in the platform), the 12-epoch training time in
    seconds, and metrics naming the cell's index and its 200-epoch validation accuracy (mean over
    seeds) on every dataset of the table (``valid_acc_200``: on ``dataset``).
    """

    epochs = 12
    space = "nb201"  # the registered search space whose cells it answers

    def __init__(self, dataset: str = "cifar10", table: NB201Table | None = None) -> None:
        self.dataset = check_dataset(dataset)
        self.table = table or load_table()
        self._reward = self.table.valid12[self.dataset] / 100.0
        self._cost = self.table.time200[self.dataset] * EPOCHS_FRACTION_12

    def query(self, arch: Arch) -> tuple[float, float, dict[str, Any]]:
        i = self.table.row(arch)
        metrics: dict[str, Any] = {"index": i, "valid_acc_12": float(self.table.valid12[self.dataset][i]),
                                   "valid_acc_200": float(self.table.valid200[self.dataset][i])}
        for name, key in _VALID200_KEYS:  # (keys made once: a run keeps every trial's metrics)
            metrics[key] = float(self.table.valid200[name][i])
        return float(self._reward[i]), float(self._cost[i]), metrics

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dataset={self.dataset!r})"


#: the two training schedules the table holds, as two fidelities (rungs) of one cell
FIDELITY_EPOCHS = (12, 200)


@functools.lru_cache(maxsize=4)
def load_cell_costs(path: str | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per dataset, each cell's parameters (count) and inference latency (ms), from the csv's
    ``*_params_M`` and ``*_latency_s`` columns (read once per process), for multi-objective runs."""
    import pandas as pd

    columns = [f"{p}_{c}" for p in DATASETS.values() for c in ("params_M", "latency_s")]
    df = pd.read_csv(path or data_path(), usecols=columns)
    return {name: ((df[f"{p}_params_M"].to_numpy(float) * 1e6).round(), df[f"{p}_latency_s"].to_numpy(float) * 1e3)
            for name, p in DATASETS.items()}


def step_epochs(step: int) -> int:
    """The schedule a scheduler's step (its "epoch" 1 or 2) stands for on the table: 12 or 200 epochs.

    A scheduler for the simulated NAS-Bench-201 runs with ``max_epochs=2`` (ASHA with grace 1: rungs
    (1, 2)); step 1 is answered by :func:`query_epochs` at 12 epochs, step 2 at 200.

    >>> [step_epochs(s) for s in (1, 2)]
    [12, 200]
    """
    if isinstance(step, bool) or step not in (1, 2):
        raise ValueError(f"NAS-Bench-201 has two fidelities, steps 1 (12 epochs) and 2 (200 epochs); got {step!r}")
    return FIDELITY_EPOCHS[step - 1]


def query_epochs(arch: Arch, epochs: int, *, dataset: str = "cifar10", table: NB201Table | None = None,
                 seed: int | None = None) -> tuple[float, float, dict[str, Any]]:
    """``(reward, seconds, metrics)`` of training ``arch`` on ``dataset`` for ``epochs`` (12 or 200).

    The metrics hold ``val_acc`` (the reward, named as the trainer names it), ``valid_acc_200`` (%, the
    mean over seeds, what a search is judged by) and the cell's parameters and inference latency (ms).
    The reward is the validation accuracy as a fraction: at 12 epochs the table's mean over seeds; at
    200 the mean over seeds, or one seed's (``seed`` modulo the seeds the cell has). The seconds are what
    that schedule costs FROM SCRATCH: the 12-epoch schedule 0.06 of the 200-epoch time, the 200-epoch
    schedule its FULL time, since a 12-epoch run does not continue into the 200-epoch one (its learning
    rate schedule is a different one). A cell promoted from 12 to 200 epochs costs 1.06 x the 200-epoch
    time in all.

    >>> from nas.search_spaces.nb201 import from_op_code
    >>> cell = from_op_code("334131")
    >>> [(round(r, 4), round(s, 2)) for r, s, _ in (query_epochs(cell, e) for e in FIDELITY_EPOCHS)]
    [(0.8283, 130.18), (0.9077, 2169.64)]
    >>> round(query_epochs(cell, 200, seed=2)[0], 4)
    0.9088
    >>> metrics = query_epochs(cell, 12)[2]
    >>> metrics["params"], round(metrics["latency_ms"], 3)
    (802426, 16.853)
    >>> query_epochs(cell, 27)
    Traceback (most recent call last):
    ...
    ValueError: NAS-Bench-201 answers at 12 or 200 epochs, got 27
    """
    if epochs not in FIDELITY_EPOCHS:
        raise ValueError(f"NAS-Bench-201 answers at 12 or 200 epochs, got {epochs!r}")
    table = table or load_table()
    dataset = check_dataset(dataset)
    i = table.row(arch)
    full = float(table.time200[dataset][i])
    if epochs == 12:
        accuracy, seconds = float(table.valid12[dataset][i]), full * EPOCHS_FRACTION_12
    else:
        seeds = table.seeds200[dataset][i]
        accuracy = float(table.valid200[dataset][i]) if seed is None else seeds[seed % len(seeds)]
        seconds = full
    params, latency = load_cell_costs()[dataset]
    metrics: dict[str, Any] = {"index": i, "epochs": epochs, "val_acc": accuracy / 100.0,
                               "valid_acc_200": float(table.valid200[dataset][i]), "train_seconds": seconds,
                               "params": int(params[i]), "latency_ms": float(latency[i])}
    return accuracy / 100.0, seconds, metrics


class NB201Fidelities(NB201Benchmark):
    """The table's two schedules (12 and 200 epochs) as fidelities a simulated executor reports at, e.g.
    the two rungs of ASHA (``levels=[12, 200]``): ``query_epochs(arch, epochs)`` is :func:`query_epochs`
    on this dataset; ``query`` (the 12-epoch protocol) is unchanged.

    >>> from nas.search_spaces.nb201 import from_op_code
    >>> bench = NB201Fidelities("cifar10")
    >>> bench.fidelities, round(bench.query_epochs(from_op_code("334131"), 200)[1], 2)
    ((12, 200), 2169.64)
    """

    fidelities = FIDELITY_EPOCHS

    def query_epochs(self, arch: Arch, epochs: int) -> tuple[float, float, dict[str, Any]]:
        return query_epochs(arch, epochs, dataset=self.dataset, table=self.table)


for _dataset in DATASETS:  # one table name per dataset, both fidelities: nb201-cifar10, ...
    register_table(f"nb201-{_dataset}")(functools.partial(NB201Fidelities, _dataset))

__all__ = ["DATASETS", "FIDELITY_EPOCHS", "NB201Benchmark", "NB201Fidelities", "NB201Table", "arch_code",
           "load_cell_costs", "load_table", "query_epochs", "step_epochs"]
