"""``nas search``: run a search, or resume one. Its flags are generated from the configuration's fields
(:mod:`nas.cli.flags`); the search itself is :func:`nas.api.search`, handed the configuration whole."""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from shlex import quote
from typing import Any

from nas.cli.common import UsageError, nonempty
from nas.cli.flags import NONE, add_config_flags, as_flag, config_from_args, given_flags
from nas.run.config import RunConfig


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("search", help="run a search", usage="%(prog)s [--config FILE | --resume RUN_DIR] [OPTION ...]",
                       description="Run a neural architecture search. Every option "
                       "can also come from a TOML or YAML file (--config run.toml) with the same keys; options "
                       "given on the command line win over the file.")
    groups = add_config_flags(p)
    run = groups["run_dir"]
    run.add_argument("--config", type=nonempty, help="TOML or YAML file with any of these options (flat keys such as "
                     "epochs = 5, or [search], [train] and [execution] tables)")
    run.add_argument("--resume", metavar="RUN_DIR", type=nonempty, help="continue the run in RUN_DIR (after a crash or "
                     f"Ctrl-C) with the options in its run.json; only {RESUME_SAID} may be given. IMPORTS CODE: "
                     "like the search that made it, a resume imports the module that run.json names for a "
                     "module:Class space or a module:function training function (from the current folder and "
                     "PYTHONPATH), so resume only runs you trust; a module found inside RUN_DIR itself is refused")
    run.add_argument("--keep-dashboard", action="store_true",
                     help="after the search, keep the local cluster and its dashboard up for inspection until Ctrl-C")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--on-interrupt", choices=["cancel", "wait"], default="cancel",
                     help="on Ctrl-C: cancel the running trials (a resume re-runs them) or wait for them to "
                     "finish; a second Ctrl-C aborts at once (default: cancel)")
    p.set_defaults(handler=cmd_search)


#: the flags a resume takes (the rest of a run's options are its run.json's); the help and the refusal say them
RESUME_FLAGS = ("--budget", "--time-budget", "--address", "--trial-timeout")
RESUME_SAID = "--budget and --time-budget (to raise them), --address and --trial-timeout"


def resume_config(args: argparse.Namespace) -> RunConfig:
    """The configuration of the run in ``args.resume`` (its run.json): its budget and time budget raised by --budget
    and --time-budget (lower ones refused), its Ray address and trial timeout replaced by --address and
    --trial-timeout (``none``: no limit)."""
    from nas.run.layout import read_config

    given = [f for f in given_flags(args, getattr(args, "argv", ()))
             if f not in RESUME_FLAGS]
    given += ["--config"] * bool(args.config)
    if given:
        raise UsageError(f"--resume takes the run's options from its run.json; only {RESUME_SAID} may be given, "
                         f"not {' '.join(given)}")
    def limit(given: Any) -> Any:  # (a flag's none: no limit)
        return math.inf if given == NONE else given

    try:
        return read_config(Path(args.resume)).resumed_as(args.resume, budget=args.budget, address=args.address,
                                                         trial_timeout=limit(args.trial_timeout),
                                                         time_budget=limit(args.time_budget))
    except ValueError as e:
        flags = {"budget": "--budget", "trial_timeout": "--trial-timeout", "time_budget": "--time-budget"}
        raise ValueError(as_flag(str(e), flags)) from None


def cmd_search(args: argparse.Namespace) -> int:
    if os.getcwd() not in sys.path:  # as `python -m` does: `--space mymodule:Tiny` finds ./mymodule.py
        sys.path.insert(0, os.getcwd())  # (Ray puts the driver's folder on its workers' path too)
    cfg = resume_config(args) if args.resume else config_from_args(args)
    print(start_line(cfg, resume=bool(args.resume)), flush=True)  # (before torch, pandas and Ray are imported)
    if cfg.train.supernet is not None and "--epochs" in given_flags(args, getattr(args, "argv", ())):
        print(f"note: a supernet search trains nothing (each sub-network is scored with the supernet's weights); "
              f"--epochs {cfg.train.settings.epochs} is kept as the epochs nas retrain trains the chosen ones for",
              file=sys.stderr, flush=True)
    from nas.parts import check_inputs, check_run_dir
    from nas.strategies.fixed import FixedArchs

    if not args.resume:
        check_inputs(cfg)  # every name, before torch, pandas and Ray are imported
    else:
        check_run_dir(args.resume, resume=True)  # (held by another search: said as it is)
        if cfg.search.strategy == FixedArchs.__name__:  # (the strategy nas.retrain hands in: no name knows it)
            raise ValueError(f"{args.resume!r} is a retraining (nas retrain): continue it with the nas retrain "
                             f"command that made it (the same run and --out)")
        try:
            check_inputs(cfg, resume=True)
        except ValueError as bad:  # (the run's own options are bad: say where they come from)
            raise ValueError(f"{Path(args.resume) / 'run.json'}: {bad}") from None
    from nas.api import search
    from nas.engine.stop import StopSignal, stop_on_sigint
    from nas.monitor.progress import SearchProgress

    if cfg.run_dir is None:  # (named here, so that an abort can say where to resume)
        from nas.session import default_run_dir

        cfg = cfg.updated({"run_dir": default_run_dir(cfg.search.space, cfg.search.strategy)})
    if args.keep_dashboard:
        e = cfg.execution
        if e.executor != "ray" or e.address or os.environ.get("RAY_ADDRESS"):
            raise UsageError("--keep-dashboard keeps the local Ray cluster that `nas search` starts; it needs "
                             "--executor ray and no --address/RAY_ADDRESS (a joined cluster outlives the search "
                             "anyway)")
        cfg = cfg.updated({"dashboard": True})
    stop = StopSignal(args.on_interrupt)
    shown = [] if args.quiet else [SearchProgress(objectives=cfg.search.objectives)]  # (the best by its name)
    try:
        with stop_on_sigint(stop):
            df = search(cfg, resume=bool(args.resume), callbacks=shown, stop=stop,
                        notify=lambda line: print(line, flush=True))
    except KeyboardInterrupt:
        if (Path(str(cfg.run_dir)) / "run.json").is_file():
            print(f"\naborted; resume with: nas search --resume {quote(str(cfg.run_dir))}", file=sys.stderr)
        else:  # (before the search started: the run was taken back)
            print(f"\naborted before the search started; nothing was kept in {cfg.run_dir}", file=sys.stderr)
        return 130
    if df.attrs.get("interrupted"):
        print(f"interrupted: {len(df)} trials finished; resume with: nas search --resume "
              f"{quote(str(df.attrs['run_dir']))}", file=sys.stderr)
        return 130
    from nas.monitor.status import format_summary, run_status

    run_dir, dashboard = df.attrs["run_dir"], df.attrs.get("dashboard")
    del df  # (the summary reads the run as `nas status` does: one table of every trial at a time, not two)
    print(format_summary(run_status(run_dir)))  # the same wall time and utilization as `nas status`
    if len(cfg.search.objectives) > 1:
        from nas.monitor.pareto import format_front, run_front

        print(format_front(*run_front(run_dir)))
    print(f"results in {run_dir}  (nas results {quote(str(run_dir))}; nas best {quote(str(run_dir))})")
    if args.keep_dashboard:
        keep_cluster_up(dashboard)
    return 0


def start_line(cfg: RunConfig, *, resume: bool) -> str:
    """The first line of ``nas search``, printed before anything heavy is imported: what it searches and where
    the trials will run.

    >>> cfg = RunConfig.from_mapping({"space": "macro", "strategy": "evolution", "budget": 24, "run_dir": "runs/a"})
    >>> line = start_line(cfg, resume=False)
    >>> line.partition(";")[0]
    'search of macro with evolution, budget 24, 2 workers on a private local Ray cluster (127.0.0.1 only), started now'
    >>> line.partition("; ")[2]
    'checking the inputs first'
    """
    from nas.engine.cluster import where_text

    s, e = cfg.search, cfg.execution
    where = where_text(e.executor, e.address or os.environ.get("RAY_ADDRESS"), e.workers, e.trial_workers)
    what = f"resuming {cfg.run_dir}: " if resume else ""
    return f"{what}search of {s.space} with {s.strategy}, budget {s.budget}, {where}; checking the inputs first"


def keep_cluster_up(dashboard_url: str | None) -> None:
    """Block until Ctrl-C (or SIGTERM), keeping this process's local Ray cluster and its dashboard up."""
    import signal

    import ray

    print(f"keeping the Ray cluster up for inspection (dashboard: {dashboard_url or '-'}); Ctrl-C ends it", flush=True)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        while True:
            signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        ray.shutdown()
