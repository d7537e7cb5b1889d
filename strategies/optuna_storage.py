"""An Optuna study and its sampler as snapshot data (no pickle): what :class:`~nas.strategies.optuna_sampler.
OptunaStrategy` needs to resume exactly, and nothing that can run code when read back.

- The sampler's random state: every ``LazyRandomState`` it holds (TPE, random, GP and NSGA-II keep one
  in ``_rng``; TPE and GP also in their fallback sampler; CMA-ES in ``_cma_rng``), as the MT19937 key
  array and position of its ``numpy.random.RandomState``.
- GPSampler's kernel-parameter cache (``_gprs_cache_list``: the starting point of the next kernel fit),
  as its three tensors per objective.
- For an in-memory study, its trials as arrays: state, value (a matrix, one column per objective, for a
  multi-objective study) and the parameter of every decision (the parameters are option indices, so an
  int matrix with -1 where a trial has none), and the trials' system and user attributes (JSON data),
  but never Optuna's own CMA-ES optimizer, a pickle that could run code
  when read: :class:`DataCmaEsSampler` stores its optimizer as data instead.

>>> import optuna
>>> from optuna.distributions import IntDistribution
>>> optuna.logging.set_verbosity(optuna.logging.WARNING)
>>> dists = {"x": IntDistribution(0, 9)}
>>> a = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
>>> for _ in range(3):
...     _ = a.tell(a.ask(dists), 1.0)
>>> state = {"trials": trials_state(a, dists), "rng": sampler_state(a.sampler)}
>>> b = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=2))
>>> load_trials(b, state["trials"], dists); load_sampler(b.sampler, state["rng"])
>>> a.ask(dists).params == b.ask(dists).params, len(b.trials)
(True, 4)
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers._lazy_random_state import LazyRandomState
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

STATES = list(TrialState)  # stored by position: RUNNING, COMPLETE, PRUNED, FAIL, WAITING
CMA_ATTR = "nas:cma"  # our data-encoded CMA-ES state, in trial system attributes (never Optuna's pickle)
PICKLED = "cma:optimizer"  # Optuna's own CmaEsSampler's pickled optimizer: never carried, never read
_ATTR_CHUNK = 2045  # optuna's limit on one system attribute's length (_SYSTEM_ATTR_MAX_LENGTH)


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
        name, keys, pos, has_gauss, gauss = lazy.rng.get_state(legacy=True)
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
        import torch  # (here: only a GP sampler's cache needs it)
        from optuna._gp.gp import GPRegressor

        def rebuild(c: Mapping[str, torch.Tensor]) -> GPRegressor:
            d = len(c["lengthscales"])  # only the kernel parameters of a cached regressor are read
            return GPRegressor(torch.zeros(d, dtype=torch.bool), torch.zeros(1, d, dtype=torch.float64),
                               torch.zeros(1, dtype=torch.float64), c["lengthscales"], c["scale"], c["noise"])

        sampler._gprs_cache_list = [rebuild(c) for c in state["gp_cache"]]


def trials_state(study: optuna.Study, distributions: Mapping[str, BaseDistribution]) -> dict[str, Any]:
    """The trials of a ``study`` whose parameters are ints (option indices), as arrays."""
    trials = study.get_trials(deepcopy=False)
    names = list(distributions)
    params = np.full((len(trials), len(names)), -1, dtype=np.int64)
    multi = len(study.directions) > 1
    values = np.full((len(trials), len(study.directions)) if multi else len(trials), np.nan)
    states = np.zeros(len(trials), dtype=np.int8)
    for i, t in enumerate(trials):
        if t.number != i:
            raise ValueError(f"optuna trial numbers are not contiguous: trial {i} has number {t.number}")
        states[i] = STATES.index(t.state)
        if t.values is not None:
            values[i] = t.values if multi else t.values[0]
        for j, name in enumerate(names):
            if name in t.params:
                params[i, j] = int(t.params[name])
    cma = [t.number for t in trials if t.state == TrialState.COMPLETE and f"{CMA_ATTR}:0" in t.system_attrs]
    latest = max(cma, default=-1)  # CMA-ES reads only the latest completed trial's optimizer: drop older ones
    attrs = {t.number: a for t in trials if (a := {k: v for k, v in t.system_attrs.items() if not (
        k.startswith(PICKLED) or k.startswith(CMA_ATTR + ":") and t.number < latest)})}
    state = {"names": names, "params": params, "values": values, "states": states, "attrs": attrs}
    user = {t.number: dict(t.user_attrs) for t in trials if t.user_attrs}
    if user:
        state["user_attrs"] = user
    study_attrs = study._storage.get_study_system_attrs(study._study_id)  # NSGA-II's parent populations
    if study_attrs:
        state["study_attrs"] = dict(study_attrs)
    return state


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
    attrs, user = state.get("attrs", {}), state.get("user_attrs", {})
    for i, (row, value, s) in enumerate(zip(params.tolist(), values.tolist(), states.tolist())):
        if not 0 <= s < len(STATES):
            raise ValueError(f"unknown optuna trial state {s}")
        p = {n: v for n, v in zip(names, row) if v >= 0}
        a = {str(k): v for k, v in attrs.get(i, {}).items() if not str(k).startswith(PICKLED)}
        done = STATES[s] == TrialState.COMPLETE
        frozen.append(optuna.trial.create_trial(
            state=STATES[s], params=p, distributions={n: distributions[n] for n in p},
            values=None if not done else value if isinstance(value, list) else [value], system_attrs=a,
            user_attrs={str(k): v for k, v in user.get(i, {}).items()}))
    study.add_trials(frozen)
    for key, value in state.get("study_attrs", {}).items():
        study._storage.set_study_system_attr(study._study_id, str(key), value)


class DataCmaEsSampler(optuna.samplers.CmaEsSampler):
    """Optuna's CMA-ES sampler, storing its optimizer between generations as JSON data in the trials'
    system attributes instead of Optuna's pickle (which a crafted journal or snapshot could use to run
    code). A pickled optimizer found in a study is never loaded: the sampler starts a fresh one.

    >>> import optuna
    >>> optuna.logging.set_verbosity(optuna.logging.WARNING)
    >>> s = optuna.create_study(sampler=DataCmaEsSampler(seed=0, n_startup_trials=0, popsize=4))
    >>> s.optimize(lambda t: (t.suggest_float("x", -3, 3) - 1) ** 2 + t.suggest_float("y", -3, 3) ** 2, 12)
    >>> any(k.startswith(CMA_ATTR) for t in s.trials for k in t.system_attrs)
    True
    >>> any(k.startswith("cma:optimizer") for t in s.trials for k in t.system_attrs)
    False
    """

    _current: Any = None

    def _init_optimizer(self, *args: Any, **kwargs: Any) -> Any:
        self._current = super()._init_optimizer(*args, **kwargs)
        return self._current

    def _restore_optimizer(self, completed_trials: list[optuna.trial.FrozenTrial]) -> Any:
        self._current = None
        for trial in reversed(completed_trials):
            chunks = {k: v for k, v in trial.system_attrs.items() if k.startswith(CMA_ATTR + ":")}
            if chunks:
                text = "".join(chunks[f"{CMA_ATTR}:{i}"] for i in range(len(chunks)))
                self._current = cma_from_data(json.loads(text))
                break
        return self._current

    def _split_optimizer_str(self, optimizer_str: str) -> dict[str, str]:
        # Optuna hands us its pickle of the optimizer; we store the same optimizer (the one just
        # restored or made, then told) as data and drop the pickle.
        text = json.dumps(cma_to_data(self._current), separators=(",", ":"))
        return {f"{CMA_ATTR}:{i}": text[j:j + _ATTR_CHUNK] for i, j in enumerate(range(0, len(text), _ATTR_CHUNK))}


def cma_to_data(optimizer: Any) -> dict[str, Any]:
    """A ``cmaes.CMA`` optimizer's attributes as JSON data (arrays as nested lists, its RandomState's key)."""
    attrs: dict[str, Any] = {}
    for name, v in vars(optimizer).items():
        if isinstance(v, np.random.RandomState):
            _, keys, pos, has_gauss, gauss = v.get_state(legacy=True)
            attrs[name] = {"rng": [np.asarray(keys).tolist(), int(pos), int(has_gauss), float(gauss)]}
        elif isinstance(v, np.ndarray) and v.dtype.kind in "biuf":
            attrs[name] = {"array": v.tolist(), "dtype": v.dtype.str, "shape": list(v.shape)}
        elif v is None or isinstance(v, (bool, int, float, np.bool_, np.integer, np.floating)):
            attrs[name] = {"value": v.item() if isinstance(v, np.generic) else v}
        else:
            raise ValueError(f"CMA-ES attribute {name!r} of type {type(v).__name__} is not data")
    return {"class": type(optimizer).__name__, "attrs": attrs}


def cma_from_data(data: Mapping[str, Any]) -> Any:
    """The optimizer :func:`cma_to_data` described (only cmaes.CMA, the class our sampler options make)."""
    import cmaes

    if data.get("class") != "CMA":
        raise ValueError(f"unsupported CMA-ES optimizer class {data.get('class')!r}")
    optimizer = cmaes.CMA.__new__(cmaes.CMA)
    for name, v in data["attrs"].items():
        if "rng" in v:
            rs = np.random.RandomState()
            keys, pos, has_gauss, gauss = v["rng"]
            rs.set_state(("MT19937", np.asarray(keys, dtype=np.uint32), int(pos), int(has_gauss), float(gauss)))
            setattr(optimizer, name, rs)
        elif "array" in v:
            dtype = np.dtype(v["dtype"])
            if dtype.kind not in "biuf":
                raise ValueError(f"CMA-ES attribute {name!r} has a non-numeric dtype {v['dtype']!r}")
            setattr(optimizer, name, np.asarray(v["array"], dtype=dtype).reshape(v["shape"]))
        else:
            setattr(optimizer, name, v["value"])
    return optimizer


RECORD_START = b'{"op_code":'  # how each record of the journal begins (SnapshotJournalBackend.append_logs)


def check_journal(path: str) -> None:
    """Refuse, before anything is written to it, a ``storage`` path that is a folder, or a file that is not an
    Optuna journal: every whole line must be one of its records (a JSON object with an ``op_code``), and a last
    line without its newline the start of one (what a crash cut short; a resume cuts it off). Optuna itself would
    append to any file (after its last line, even one without a newline) and fail later, or take a JSON line of
    another kind for a record."""
    if os.path.exists(path) and not os.path.isfile(path):
        raise ValueError(f"storage={path!r} is {'a folder' if os.path.isdir(path) else 'not a regular file'}; "
                         f"give a file path for the study's journal")
    if not os.path.exists(path):
        return
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            if not line.endswith(b"\n") and (line.startswith(RECORD_START) or RECORD_START.startswith(line)):
                break
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):
                record = None
            if not isinstance(record, dict) or "op_code" not in record:
                raise ValueError(f"storage={path!r} is not an Optuna journal (line {number} is not one of its "
                                 f"records); give a new file, or one an earlier study of this strategy wrote")


class SnapshotJournalBackend(JournalFileBackend):
    """Optuna's journal file, appended without an fsync (and without Optuna's file lock) per record: the
    strategy calls :meth:`sync` once per snapshot and a resume cuts the file back to the snapshot's
    length, so nothing a crash may lose after the last sync is ever read. One writer is the run
    directory's lock's job. Optuna's own backend fsyncs every record, about ten per trial."""

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        text = "".join(json.dumps(log, separators=(",", ":")) + "\n" for log in logs)
        with open(self._file_path, "ab") as f:
            f.write(text.encode())

    def sync(self) -> int:
        """Make every record so far durable; returns the file's length."""
        fd = os.open(self._file_path, os.O_RDONLY)
        try:
            os.fsync(fd)
            return os.fstat(fd).st_size
        finally:
            os.close(fd)
