"""``nas results RUN_DIR`` (the trials as a table, CSV, JSON or parquet) and ``nas best RUN_DIR`` (the best
architecture, its export, its test accuracy, the Pareto front). Both only read the run directory."""

from __future__ import annotations

import argparse
import io
import json
import shutil
import sys
from pathlib import Path

from nas.cli.common import UsageError


def cmd_results(args: argparse.Namespace) -> int:
    from nas.monitor.page import _parser
    from nas.monitor.tables import export_frame, results_table
    from nas.run.warmstart import load_run_with_warm

    cfg, df = load_run_with_warm(args.run_dir)
    if args.top < 1:
        raise UsageError(f"--top must be >= 1, got {args.top}")
    flat = export_frame(df, _parser(cfg))
    for path, write in ((args.csv, flat.to_csv), (args.parquet, flat.to_parquet)):
        if path:
            from nas.run.export import write_export  # (a run's own files refused; atomic: nothing left on failure)

            buffer = io.BytesIO()
            write(buffer, index=False)
            write_export(path, buffer.getvalue())
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
    from nas.run.reader import load_run, read_journal

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
    from nas.run.export import write_export  # (a run's own files refused; atomic: nothing left on failure)

    if args.export_json:
        write_export(args.export_json, json.dumps(
            {"trial_id": int(best.trial_id), "arch": dict(trial.arch), "arch_str": best.arch,
             "score": float(best.score), "hparams": dict(trial.hparams)}, indent=2).encode())
        print(f"wrote {args.export_json}")
    if args.export_weights:
        from nas.run.store import best_checkpoint  # (checked to be data: torch.load(weights_only=True))

        write_export(args.export_weights, best_checkpoint(Path(args.run_dir), int(best.trial_id)))
        print(f"wrote {args.export_weights} (torch.load it: keys model, optimizer, epoch, arch, hparams)")
    if args.evaluate_test:
        from nas.monitor.testset import evaluate_test

        t = evaluate_test(args.run_dir, int(best.trial_id))
        print(f"test accuracy {t['test_acc']:.4f} (loss {t['test_loss']:.4f}) on {t['test_images']:,} test images, "
              f"for this architecture only: the search never saw the test set")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
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
    p.add_argument("--evaluate-test", action="store_true", help="its accuracy on the dataset's test split (rebuilds "
                   "the run's space: a module:Class space's module is imported)")
    p.add_argument("--pareto", action="store_true",
                   help="list the Pareto front of the run's objectives (trial, each objective, architecture)")
    p.add_argument("--export", metavar="DIR", help="with --pareto: write DIR/front.json and the members' kept "
                   "weights (DIR/weights/<trial>.pt)")
    p.set_defaults(handler=cmd_best)
