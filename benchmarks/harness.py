"""The harness every experiment shares: seeded searches through the real loop, many seeds in a process pool, the
outcome record, confidence intervals, step curves, text tables, plots and the command-line checks.

>>> print(text_table([["side", "s/trial"], ["ours", "0.0012"], ["tune", "0.0419"]], rule=True))
side  s/trial
-------------
ours   0.0012
tune   0.0419
>>> runs = [Outcome("x", 0, curve=[(10.0, 50.0)]), Outcome("x", 1, curve=[(10.0, 70.0)])]
>>> values_at(runs, np.array([1.0, 20.0])).tolist()
[[nan, 50.0], [nan, 70.0]]
>>> mean_ci(values_at(runs, np.array([1.0, 20.0]), before=0.0))
(array([ 0., 60.]), array([ 0. , 19.6]))
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import io
import json
import multiprocessing
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nas.cli.common import folder_arg

#: the strategy options of the NAS-Bench-201 protocol's runs where they apply (R-EA: population 10, tournament 3)
PROTOCOL_OPTIONS: dict[str, dict[str, Any]] = {"evolution": {"population": 10, "sample_size": 3}}


@dataclasses.dataclass
class Outcome:
    """One seeded run of one method: its trials, the strategy's own ask+tell seconds, and a step curve
    ``(time, value)`` with a point each time the value changes (experiments add fields of their own)."""

    method: str
    seed: int
    trials: int = 0
    strategy_seconds: float = dataclasses.field(default=0.0, compare=False)  # a timing: not part of the result
    curve: list[tuple[float, float]] = dataclasses.field(default_factory=list)


# -- one search, many seeds -------------------------------------------------------------------------------------
def simulated_search(strategy: Any, benchmark: Any, *, seed: int, workers: int = 1, budget: int | None = None,
                     time_budget: float | None = None, noise: float = 0.0, options: Mapping[str, Any] | None = None,
                     objectives: Sequence[str] = ("val_acc:max",), epochs: int | None = None, scheduler: Any = None,
                     callbacks: Sequence[Any] = (), stop: Any = None) -> tuple[Any, Any]:
    """One seeded search of ``strategy`` (a registered name, or a strategy) through the real
    :class:`nas.engine.loop.SearchLoop` on a :class:`nas.engine.simulated.SimulatedExecutor` handed ``benchmark`` (a
    table object, or a name of :data:`nas.core.registry.tables`), without a journal; the finished loop and executor.
    ``noise``: std of Gaussian noise on each reward, in accuracy points (the executor's scores are fractions);
    ``stop``: a :class:`nas.engine.stop.StopSignal` a callback may request."""
    from nas.api import build_strategy
    from nas.core.registry import spaces, tables
    from nas.engine.loop import SearchLoop
    from nas.engine.simulated import SimulatedExecutor

    bench = tables.get(benchmark)() if isinstance(benchmark, str) else benchmark
    space = spaces.get(bench.space)()
    executor = SimulatedExecutor(space, bench, workers=workers, seed=seed, noise=noise / 100,
                                 objectives=list(objectives), epochs=epochs)
    loop = SearchLoop(build_strategy(strategy, space, seed, options, list(objectives)), executor, budget=budget,
                      time_budget=time_budget, scheduler=scheduler, callbacks=callbacks, stop=stop)
    loop.run()
    return loop, executor


def scoring_executor(space: Any, score: Callable[[Any], float], *, slots: int = 1) -> Any:
    """The in-process executor with ``slots`` trials outstanding, each scored by ``score(arch)`` at once (no
    training), for experiments that time the loop or the strategy rather than training."""
    from nas.engine.inprocess import InProcessExecutor

    return InProcessExecutor(space, None, train=Scored(score), slots=slots)


class Scored:
    """A training function that scores an architecture at once and keeps an empty checkpoint, so that a trial
    starting from another's (PBT's exploit) finds it there, as on a real worker."""

    def __init__(self, score: Callable[[Any], float]) -> None:
        self.score = score

    def __call__(self, ctx: Any) -> None:
        ctx.checkpoint.provide(dict)
        ctx.report(epoch=1, val_acc=float(self.score(ctx.trial.arch)))


def run_seeds(fn: Callable[..., Any], methods: Sequence[Any], seeds: Sequence[int], *, jobs: int = 1,
              options: Mapping[Any, Mapping[str, Any]] | None = None, **kwargs: Any) -> list[Any]:
    """``fn(method, seed, **kwargs)`` for every method and seed (method by method), in ``jobs`` processes (results
    do not depend on ``jobs``); with ``options`` (method -> its options) also ``options=`` that method's."""
    work = [(fn, m, s, {**kwargs, **({"options": dict(options.get(m, {}))} if options is not None else {})})
            for m in methods for s in seeds]
    return pool_map(_call, work, jobs)


def _call(job: tuple[Callable[..., Any], Any, int, dict[str, Any]]) -> Any:
    fn, method, seed, kwargs = job
    return fn(method, seed, **kwargs)


def pool_map(fn: Callable[[Any], Any], work: Sequence[Any], jobs: int) -> list[Any]:
    """``[fn(w) for w in work]``, in ``jobs`` fresh processes when ``jobs`` > 1 (same results, in order)."""
    if jobs <= 1 or len(work) <= 1:
        return [fn(w) for w in work]
    ctx = multiprocessing.get_context("spawn")  # no fork of a process that has imported torch
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=ctx, initializer=_init_worker) as pool:
        return list(pool.map(fn, work, chunksize=max(1, len(work) // (8 * jobs))))


def _init_worker() -> None:
    import torch

    from nas.engine.tabular.nb201_table import load_table

    torch.set_num_threads(1)  # one process per core; strategies with torch models stay on theirs
    load_table()


# -- figures of many runs -------------------------------------------------------------------------------------
def values_at(outcomes: Sequence[Outcome], times: np.ndarray, *, before: float = float("nan")) -> np.ndarray:
    """Each run's curve (a step function) at each of ``times``, ``before`` its first point: (runs, times)."""
    out = np.full((len(outcomes), len(times)), before)
    for k, o in enumerate(outcomes):
        if o.curve:
            t, v = np.array(o.curve).T
            idx = np.searchsorted(t, times, side="right") - 1
            out[k] = np.where(idx >= 0, v[np.clip(idx, 0, None)], before)
    return out


def mean_ci(values: np.ndarray) -> tuple[Any, Any]:
    """The mean over runs (axis 0) and the half-width of its 95% confidence interval (1.96 standard errors; NaN
    for one run)."""
    values = np.asarray(values, dtype=float)
    n = len(values)
    half = 1.96 * values.std(axis=0, ddof=1) / np.sqrt(n) if n > 1 else np.full(values.shape[1:], np.nan)
    return values.mean(axis=0), half


def text_table(rows: Sequence[Sequence[str]], *, rule: bool = False) -> str:
    """Rows of cells as aligned text: the first column left-aligned, the others right-aligned; with ``rule`` a
    line of dashes under the first row (the header)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths))) for r in rows]
    if rule:
        lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


# -- plots (matplotlib, written to a file) ----------------------------------------------------------------------
@contextlib.contextmanager
def figure(path: Path | str, *, xlabel: str, ylabel: str, title: str, log_x: bool = False,
           ylim: tuple[float, float] | None = None, small: bool = False) -> Iterator[Any]:
    """The axes of a new figure, drawn into inside the block, labelled and saved to ``path`` at its end."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    try:
        yield ax
        if log_x:
            ax.set_xscale("log")
        if ylim is not None:
            ax.set_ylim(*ylim)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=8 if small else 10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(loc="lower right", fontsize=8 if small else None)
        fig.tight_layout()
        image = io.BytesIO()
        fig.savefig(image, format=Path(path).suffix.lstrip(".") or "png")
        write_out(path, image.getvalue())
    finally:
        plt.close(fig)


def plot_bands(grid: np.ndarray, bands: Mapping[str, tuple[np.ndarray, np.ndarray]], path: Path | str, *,
               lines: Sequence[tuple[float, str, str]] = (), **labels: Any) -> None:
    """One line per label (``bands``: label -> (mean, half-width) on ``grid``) with a band of +- the half-width,
    and horizontal reference ``lines`` (y, label, linestyle); ``labels``: those of :func:`figure`."""
    with figure(path, **labels) as ax:
        for label, (mean, half) in bands.items():
            ax.plot(grid, mean, lw=1.8, label=label)
            ax.fill_between(grid, mean - half, mean + half, alpha=0.15)
        for y, label, style in lines:
            ax.axhline(y, color="k" if style == ":" else "grey", ls=style, lw=1, label=label)


# -- the command line -------------------------------------------------------------------------------------------
def check_runs(args: Any, *, quick: tuple[int, float]) -> None:
    """--seeds, --workers and --jobs >= 1 and --time-budget finite and > 0, as given (a bad value is refused even
    beside --quick); then ``--quick``'s (seeds, simulated seconds) where asked for."""
    at_least(1, seeds=args.seeds, workers=args.workers, jobs=args.jobs)
    if not 0 < args.time_budget < float("inf"):
        raise ValueError(f"--time-budget must be a finite number of simulated seconds > 0, got {args.time_budget}")
    apply_quick(args, seeds=quick[0], time_budget=quick[1])


#: said in every ``--quick``'s help
QUICK_WINS = "; a flag given beside it keeps its value"


def apply_quick(args: Any, **values: Any) -> None:
    """With ``--quick``, its ``values`` for the flags not typed: a flag given beside it keeps its value (``--quick
    --seeds 5`` ran 3 seeds unsaid). Typed flags are those an experiment's parser kept in ``args.given``."""
    if getattr(args, "quick", False):
        given: set[str] = getattr(args, "given", set())
        for name, value in values.items():
            if name not in given:
                setattr(args, name, value)


def add_simulation_arguments(p: Any) -> None:
    """The options of an experiment on the simulated NAS-Bench-201: the search dataset, strategy options, reward
    noise, processes and the output directory."""
    from nas.engine.tabular.nb201_table import DATASETS

    p.add_argument("--search-dataset", choices=list(DATASETS),
                   help="whose 12-epoch validation accuracy is the reward and whose time is charged "
                        "(default: --dataset's)")
    p.add_argument("-o", "--option", action="append", default=[], metavar="STRATEGY.KEY=VALUE",
                   help="a strategy option, e.g. -o evolution.population=20 (repeatable; "
                        f"protocol defaults: {PROTOCOL_OPTIONS})")
    p.add_argument("--noise", type=float, default=0.0,
                   help="std of Gaussian noise added to each reward, in accuracy points (default 0)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes (default: all cores)")
    p.add_argument("--out", default="bench-results", type=folder_arg, help="directory for the CSV and the plot")


def parse_strategy_options(pairs: Sequence[str], defaults: Mapping[str, Mapping[str, Any]] | None = None,
                           strategies: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    """``["evolution.population=20"]`` -> ``{"evolution": {"population": 20}}``, over ``defaults``; with
    ``strategies`` (the run's), an option of a strategy not among them is a ValueError naming it (it was ignored)."""
    from nas.cli import parse_value

    out = {k: dict(v) for k, v in (defaults or {}).items()}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        strategy, dot, option = key.partition(".")
        if not sep or not dot or not strategy.strip() or not option.strip():
            raise ValueError(f"-o {pair!r} is not STRATEGY.KEY=VALUE (e.g. -o evolution.population=20)")
        if strategies is not None and strategy not in strategies:
            raise ValueError(f"-o {pair!r}: strategy {strategy!r} is not in this run ({', '.join(strategies)})")
        out.setdefault(strategy, {})[option] = parse_value(value)
    return out


def check_strategy_options(names: Sequence[str], options: Mapping[str, Mapping[str, Any]]) -> None:
    """Each of ``names`` built once on NAS-Bench-201 with its ``options``, so that a bad option (an unknown name,
    ``population=0``, ``dedup=abc``) is refused before anything runs or is written, not in the first search."""
    from nas.api import build_strategy
    from nas.search_spaces.nb201 import NB201Space

    space = NB201Space()
    for name in names:
        try:
            build_strategy(name, space, 0, options.get(name, {}), ["val_acc:max"])
        except ValueError as e:
            raise ValueError(f"-o {name}: {e}") from None


def check_noise(noise: float) -> float:
    """``--noise``: a finite number of accuracy points >= 0 (inf gave blank result rows; -1 was refused in the
    simulator's units, as -0.01)."""
    if not 0 <= noise < float("inf"):
        raise ValueError(f"--noise must be a finite number of accuracy points >= 0, got {noise:g}")
    return noise


def strategy_names(text: str | None, flag: str = "--strategies") -> list[str]:
    """Comma-separated registered strategies (every one when ``text`` is None: the flag not given); an empty item
    or an unknown name is a ValueError naming ``flag`` (``','`` ran nothing and said so with exit 0)."""
    from nas.core import registry

    names = items(text, flag) if text is not None else registry.strategies.names()
    for name in names:
        strategy_name(name, flag)
    return names


def strategy_name(name: str, flag: str = "--strategy") -> str:
    """``name`` if it is a registered strategy, else a ValueError naming ``flag`` and the known ones (checked
    before a benchmark starts: an unknown one reached a child process's traceback)."""
    from nas.core import registry

    try:
        registry.strategies.get(name)
    except ValueError as e:
        raise ValueError(f"{flag}: {e}") from None
    return name


def items(text: str, flag: str) -> list[str]:
    """``"a, b"`` -> ``["a", "b"]``; an empty or blank item (``"a,,b"``, ``","``, ``""``) is a ValueError naming
    ``flag`` and the value as typed."""
    parts = [s.strip() for s in text.split(",")]
    if not all(parts):
        raise ValueError(f"{flag} {text!r} has an empty item; give comma-separated values")
    return parts


def int_list(text: str, flag: str) -> list[int]:
    """``"1,4,16"`` -> ``[1, 4, 16]``; anything else a ValueError naming ``flag``."""
    try:
        return [int(x) for x in items(text, flag)]
    except ValueError:
        raise ValueError(f"{flag} must be comma-separated integers, got {text!r}") from None


def at_least(low: float, **flags: float) -> None:
    """A ValueError for the first flag below ``low`` (``sample_size`` is named ``--sample-size``)."""
    for name, value in flags.items():
        if value < low:
            raise ValueError(f"--{name.replace('_', '-')} must be >= {low}, got {value}")


def write_out(path: str | os.PathLike[str], data: bytes | str) -> None:
    """A benchmark's output file, as every user-named file is written (:func:`nas.run.export.write_export`: never a
    run directory's own file, atomically, one line when it fails)."""
    from nas.run.export import write_export

    write_export(path, data.encode() if isinstance(data, str) else data)


def write_json(path: str | None, data: Any) -> None:
    """With a ``--json`` path, the figures there (and a line saying so)."""
    if path:  # (a set, as the flags typed that an experiment records in its arguments, as a sorted list)
        write_out(path, json.dumps(data, indent=2, default=lambda o: sorted(o) if isinstance(o, set) else str(o)))
        print(f"wrote {path}")
