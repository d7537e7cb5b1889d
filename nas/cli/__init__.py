"""The ``nas`` command line: ``nas search``, ``nas results``, ``nas best``, ``nas spaces``, ``nas strategies``.

Every option of ``nas search`` can also come from a TOML or YAML file (``--config run.toml``) whose keys
are :class:`nas.api.SearchConfig`'s fields; options given on the command line win over the file.
Errors in what you asked for print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import shutil
import sys
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nas.core import registry

#: Modules that add subcommands: each has ``register(subparsers)``; their handlers are ``args.handler``.
COMMAND_MODULES: list[str] = ["nas.cli.bench", "nas.cli.monitor", "nas.cli.train"]


class UsageError(ValueError):
    """Raised for bad input; main() prints it on one line and exits 2."""


def parse_value(text: str) -> Any:
    """``"3"`` -> 3, ``"0.5"`` -> 0.5, ``"true"`` -> True, ``"[1,2]"`` -> [1, 2], anything else a string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_options(pairs: Sequence[str]) -> dict[str, Any]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"strategy option {pair!r} is not KEY=VALUE (e.g. -o population=20)")
        out[key] = parse_value(value)
    return out


def read_config(path: str) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"config file {path!r} does not exist")
    text = p.read_text()
    try:
        if p.suffix == ".toml":
            data = tomllib.loads(text)
        elif p.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            raise UsageError(f"config file {path!r} must end in .toml, .yaml or .yml")
    except (tomllib.TOMLDecodeError, ImportError) as e:
        raise UsageError(f"config file {path!r} is malformed: {e}") from None
    except Exception as e:  # yaml.YAMLError and friends
        if isinstance(e, UsageError):
            raise
        raise UsageError(f"config file {path!r} is malformed: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise UsageError(f"config file {path!r} must hold a table of options, got {type(data).__name__}")
    return {k.replace("-", "_"): v for k, v in data.items()}


# -- nas search -------------------------------------------------------------------------------------
SEARCH_FLAGS: list[tuple[str, type | Callable[[str], Any], str]] = [
    ("space", str, "registered space name (see `nas spaces`) or module:attr of your own SearchSpace"),
    ("strategy", str, "registered strategy name (see `nas strategies`)"),
    ("budget", int, "number of trials to finish"),
    ("workers", int, "trainer actors (trials in parallel)"),
    ("dataset", str, "digits, synthetic, a .npz file with arrays x, y, or images from disk: cifar10:DIR, "
     "cifar100:DIR, imagefolder:DIR (options: DIR?val=0.1&size=32)"),
    ("epochs", int, "training epochs per trial"),
    ("lr", float, "learning rate"),
    ("batch_size", int, "minibatch size"),
    ("optimizer", str, "adam, adamw or sgd"),
    ("recipe", str, "training recipe (see `nas recipes`), e.g. nb201; options given explicitly win over it"),
    ("seed", int, "seed of the strategy, the data split and the training"),
    ("run_dir", str, "where the journal, config and best weights go (default runs/<time>-<space>-<strategy>)"),
    ("executor", str, "ray (default), inprocess or simulated (registered executors: nas.core.registry.executors)"),
    ("address", str, "Ray cluster to join (default: $RAY_ADDRESS, else start a local one)"),
    ("cpus_per_trial", float, "CPUs per trainer actor; torch uses this many threads"),
    ("gpus_per_trial", float, "GPUs per trainer actor, fractional packs several trials on one GPU"),
    ("max_retries", int, "resubmissions of a trial whose worker died"),
    ("trial_workers", int, "processes that train each trial data-parallel (torch DDP); --workers then counts gangs"),
    ("gang_strategy", str, "where a gang's processes go: PACK (few nodes) or SPREAD (many)"),
    ("device", str, "auto, cpu or cuda"),
    ("scheduler", str, "early stopping on per-epoch reports: none, asha, hyperband or median (see `nas schedulers`)"),
    ("max_params", int, "constraint: candidates with more parameters are infeasible (not trained)"),
    ("max_flops", float, "constraint: FLOPs of one forward pass of one example"),
    ("max_latency_ms", float, "constraint: median inference latency at batch 1 on the worker's device, in ms"),
]


def add_search_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("search", help="run a search", description="Run a neural architecture search.")
    p.add_argument("--config", help="TOML or YAML file with any of these options")
    for name, typ, help_ in SEARCH_FLAGS:
        default = getattr(_DEFAULTS, name)
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=typ, default=None,
                       help=f"{help_} (default: {default})")
    p.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a strategy option, e.g. -o population=20 -o sample_size=5 (repeatable)")
    p.add_argument("--objective", action="append", dest="objectives", default=None, metavar="METRIC[:max|min]",
                   help="a metric the trials report, to maximise (default) or minimise; repeat it for a "
                   "multi-objective search (default: val_acc)")
    p.add_argument("--warm-start", action="append", dest="warm_start", default=None, metavar="RUN_DIR",
                   help="an earlier run (same space and objectives) whose finished trials the strategy learns from "
                   "before its first ask, without re-running them (repeatable)")
    p.add_argument("--scheduler-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a scheduler option, e.g. --scheduler-option eta=3 --scheduler-option variant=promotion")
    p.add_argument("--dashboard", action=argparse.BooleanOptionalAction, default=None,
                   help="start Ray's dashboard (on 127.0.0.1) with a local cluster and print its URL (default: off)")
    p.add_argument("--keep-dashboard", action="store_true",
                   help="after the search, keep the local cluster and its dashboard up for inspection until Ctrl-C")
    p.add_argument("--no-amp", dest="amp", action="store_const", const=False, default=None,
                   help="no bf16 autocast on GPUs")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR (after a crash or Ctrl-C) "
                   "with the options in its run.json; only --budget (raised) and --address may be given")
    p.add_argument("--on-interrupt", choices=["cancel", "wait"], default="cancel",
                   help="on Ctrl-C: cancel the running trials (a resume re-runs them) or wait for them to "
                   "finish; a second Ctrl-C aborts at once (default: cancel)")
    p.set_defaults(handler=cmd_search)


def search_config(args: argparse.Namespace) -> Any:
    from nas.api import SearchConfig

    values = read_config(args.config) if args.config else {}
    for f in dataclasses.fields(SearchConfig):
        given = getattr(args, f.name, None)
        if given is not None:
            values[f.name] = given
    if args.option:
        values["strategy_options"] = {**values.get("strategy_options", {}), **parse_options(args.option)}
    if args.scheduler_option:
        values["scheduler_options"] = {**values.get("scheduler_options", {}), **parse_options(args.scheduler_option)}
    return SearchConfig.from_mapping(values)


def resume_config(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """The RunConfig, TrainSettings and space of the run in ``args.resume``, its budget raised by --budget."""
    from nas.api import SearchConfig, space_from_spec
    from nas.run.reader import resume_settings
    from nas.run.store import read_config
    from nas.train.settings import TrainSettings

    given = [f"--{f.name.replace('_', '-')}" for f in dataclasses.fields(SearchConfig)
             if getattr(args, f.name, None) is not None and f.name not in ("budget", "address")]
    given += ["--config"] * bool(args.config) + ["-o"] * bool(args.option)
    given += ["--scheduler-option"] * bool(args.scheduler_option)
    if given:
        raise UsageError(f"--resume takes the run's options from its run.json; only --budget (to raise it) "
                         f"and --address may be given, not {' '.join(given)}")
    values = resume_settings(args.resume)
    values.update({k: getattr(args, k) for k in ("budget", "address") if getattr(args, k) is not None})
    saved = read_config(Path(args.resume))
    if not isinstance(saved.get("settings"), dict) or not isinstance(saved.get("space_spec"), dict):
        raise UsageError(f"{args.resume!r}/run.json lacks settings or space_spec: it cannot be resumed from the "
                         "command line")
    names = {f.name for f in dataclasses.fields(TrainSettings)}
    settings = TrainSettings(**{k: v for k, v in saved["settings"].items() if k in names})
    values["dataset"] = saved.get("data") or values["dataset"]
    return SearchConfig.from_mapping(values), settings, space_from_spec(saved["space_spec"])


def cmd_search(args: argparse.Namespace) -> int:
    from nas.api import connect, default_run_dir, search
    from nas.core.spec import resolve_space_spec
    from nas.engine.stop import StopSignal, stop_on_sigint
    from nas.monitor.progress import SearchProgress

    if args.resume:
        cfg, settings, space = resume_config(args)
    else:
        cfg = search_config(args)
        settings, space = cfg.settings(), cfg.space
    cfg.run_dir = cfg.run_dir or default_run_dir(cfg.space, cfg.strategy)
    resolve_space_spec(cfg.space, allow_import=True)  # a space that is no SearchSpace fails before Ray starts
    if args.keep_dashboard and (cfg.executor != "ray" or cfg.address or os.environ.get("RAY_ADDRESS")):
        raise UsageError("--keep-dashboard keeps the local Ray cluster that `nas search` starts; it needs "
                         "--executor ray and no --address/RAY_ADDRESS (a joined cluster outlives the search anyway)")
    url = None
    if cfg.executor == "ray":
        url = connect(cfg.address, dashboard=bool(cfg.dashboard or args.keep_dashboard),
                      run_name=Path(cfg.run_dir).name)
        if url:
            print(f"Ray dashboard: {url}", flush=True)
        import ray

        if cfg.gpus_per_trial > 0 and not ray.cluster_resources().get("GPU"):
            print(f"no GPU in the Ray cluster: --gpus-per-trial {cfg.gpus_per_trial:g} ignored, training on CPUs")
    stop = StopSignal(args.on_interrupt)
    try:
        with stop_on_sigint(stop):
            df = search(space, cfg.strategy, budget=cfg.budget, workers=cfg.workers, data=cfg.dataset,
                        executor=cfg.executor, settings=settings, strategy_options=cfg.strategy_options,
                        seed=cfg.seed, run_dir=cfg.run_dir, address=cfg.address, cpus_per_trial=cfg.cpus_per_trial,
                        gpus_per_trial=cfg.gpus_per_trial, max_retries=cfg.max_retries,
                        trial_workers=cfg.trial_workers, gang_strategy=cfg.gang_strategy,
                        callbacks=[] if args.quiet else [SearchProgress()], resume=bool(args.resume), stop=stop,
                        scheduler=cfg.scheduler, scheduler_options=cfg.scheduler_options, objectives=cfg.objectives,
                        warm_start=cfg.warm_start)
    except KeyboardInterrupt:
        print(f"\naborted; resume with: nas search --resume {cfg.run_dir}", file=sys.stderr)
        return 130
    if df.attrs.get("interrupted"):
        print(f"interrupted: {len(df)} trials finished; resume with: nas search --resume {df.attrs['run_dir']}",
              file=sys.stderr)
        return 130
    from nas.monitor.status import format_summary, run_status

    run_dir = df.attrs["run_dir"]
    print(format_summary(run_status(run_dir)))  # the same wall time and utilization as `nas status`
    if len(cfg.objectives) > 1:
        from nas.monitor.pareto import format_front, run_front

        print(format_front(*run_front(run_dir)))
    print(f"results in {run_dir}  (nas results {run_dir}; nas best {run_dir})")
    if args.keep_dashboard:
        keep_cluster_up(url)
    return 0


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


# -- nas results / best -----------------------------------------------------------------------------
def cmd_results(args: argparse.Namespace) -> int:
    from nas.api import load_run
    from nas.monitor.page import _parser
    from nas.monitor.tables import export_frame, results_table

    cfg, df = load_run(args.run_dir, with_warm=True)
    if args.top < 1:
        raise UsageError(f"--top must be >= 1, got {args.top}")
    flat = export_frame(df, _parser(cfg))
    for path, write in ((args.csv, flat.to_csv), (args.parquet, flat.to_parquet)):
        if path:
            try:
                write(path, index=False)
            except OSError as e:
                raise UsageError(f"cannot write {path!r}: {e.strerror}") from None
            print(f"wrote {len(df)} trials to {path}", file=sys.stderr if args.format != "table" else sys.stdout)
    if (args.csv or args.parquet) and args.format == "table":
        return 0
    order = df.sort_values("score", ascending=False, na_position="last").index if args.sort == "score" else df.index
    if args.format == "csv":
        flat.loc[order].to_csv(sys.stdout, index=False)
        return 0
    if args.format == "json":
        print(flat.loc[order].to_json(orient="records", indent=1))
        return 0
    if df.empty:
        print("no finished trials yet")
        return 0
    width = shutil.get_terminal_size((200, 20)).columns if sys.stdout.isatty() else None
    print(results_table(df.loc[order].head(args.top), width))
    n_ok = int((df.state == "COMPLETE").sum())
    more = f" (best {args.top} shown; --top N for more)" if len(df) > args.top else ""
    print(f"\n{len(df)} trials: {n_ok} complete, {len(df) - n_ok} failed{more}")
    return 0


def cmd_best(args: argparse.Namespace) -> int:
    from nas.api import load_run
    from nas.run.reader import read_journal

    if args.pareto or args.export:
        if not args.pareto:
            raise UsageError("--export DIR goes with --pareto (the front's members); for the best trial use "
                             "--export-json / --export-weights")
        from nas.monitor.pareto import cmd_pareto

        return cmd_pareto(args.run_dir, args.export)

    _, df = load_run(args.run_dir)
    done = df[df.state == "COMPLETE"]
    if done.empty:
        raise UsageError(f"run {args.run_dir!r} has no completed trial")
    best = done.loc[done.score.idxmax()]
    records = {t.trial_id: t for t, _ in read_journal(args.run_dir)}
    trial = records[int(best.trial_id)]
    print(f"best trial {best.trial_id}: score {best.score:.4f}")
    print(f"architecture: {best.arch}")
    print(f"metrics: {json.dumps(best.metrics, default=str)}")
    if args.export_json:
        Path(args.export_json).write_text(json.dumps(
            {"trial_id": int(best.trial_id), "arch": dict(trial.arch), "arch_str": best.arch,
             "score": float(best.score), "hparams": dict(trial.hparams)}, indent=2))
        print(f"wrote {args.export_json}")
    if args.export_weights:
        from nas.run.store import best_weights

        shutil.copyfile(best_weights(Path(args.run_dir), int(best.trial_id)), args.export_weights)
        print(f"wrote {args.export_weights} (torch.load it: keys model, optimizer, epoch, arch, hparams)")
    if args.evaluate_test:
        from nas.train.evaluate import evaluate_test

        t = evaluate_test(args.run_dir)
        print(f"test accuracy {t['test_acc']:.4f} (loss {t['test_loss']:.4f}) on {t['test_images']:,} test images, "
              f"for this architecture only: the search never saw the test set")
    return 0


def cmd_spaces(args: argparse.Namespace) -> int:
    from nas.monitor.listing import listing

    print(listing(registry.spaces.items(), size=True))
    return 0


def cmd_strategies(args: argparse.Namespace) -> int:
    from nas.monitor.listing import listing

    print(listing(registry.strategies.items(), module_first=True))
    return 0


def cmd_schedulers(args: argparse.Namespace) -> int:
    from nas.monitor.listing import listing

    print(listing(registry.schedulers.items(), module_first=True))
    return 0


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return f"nas-ray {dist_version('nas-ray')}"
    except PackageNotFoundError:
        return "nas-ray (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nas", description="Parallel neural architecture search on Ray.")
    parser.add_argument("--version", action="version", version=version())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_search_parser(sub)
    p = sub.add_parser("results", help="a run's trials as a table, CSV or JSON; export CSV/parquet",
                       description="A run's trials: an aligned table with units, or CSV/JSON/parquet with one "
                       "column per decision (arch_*), per hyperparameter (hparams_*) and the measured costs.")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table",
                   help="what to print: table (best --top rows), or csv/json (every trial) (default: table)")
    p.add_argument("--csv", metavar="FILE", help="write every trial to this CSV file")
    p.add_argument("--parquet", metavar="FILE", help="write every trial to this parquet file")
    p.add_argument("--top", type=int, default=50, help="rows of the table (default: 50)")
    p.add_argument("--sort", choices=["score", "finish"], default="score",
                   help="best first, or in finishing order (default: score)")
    p.set_defaults(handler=cmd_results)
    p = sub.add_parser("best", help="a run's best architecture; export it and its weights")
    p.add_argument("run_dir")
    p.add_argument("--export-json", metavar="FILE", help="write the architecture and hparams as JSON")
    p.add_argument("--export-weights", metavar="FILE", help="copy its trained weights (torch file)")
    p.add_argument("--evaluate-test", action="store_true", help="its accuracy on the dataset's test split")
    p.add_argument("--pareto", action="store_true",
                   help="list the Pareto front of the run's objectives (trial, each objective, architecture)")
    p.add_argument("--export", metavar="DIR", help="with --pareto: write DIR/front.json and the members' kept "
                   "weights (DIR/weights/<trial>.pt)")
    p.set_defaults(handler=cmd_best)
    sub.add_parser("spaces", help="list the search spaces, their options and defaults").set_defaults(
        handler=cmd_spaces)
    sub.add_parser("strategies", help="list the search strategies, their options (-o) and defaults").set_defaults(
        handler=cmd_strategies)
    sub.add_parser("schedulers", help="list the early-stopping schedulers, their options and defaults").set_defaults(
        handler=cmd_schedulers)
    for module in COMMAND_MODULES:
        importlib.import_module(module).register(sub)
    from nas.monitor.listing import tidy_help

    tidy_help(parser)  # docstring markup out, no default named twice
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except (ValueError, FileNotFoundError, PermissionError) as e:
        print(f"nas {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\nnas {args.command}: interrupted", file=sys.stderr)
        return 130


def _defaults() -> Any:
    from nas.api import SearchConfig

    return SearchConfig()


_DEFAULTS = _defaults()

