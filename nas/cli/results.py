"""``nas results RUN_DIR`` (the trials as a table, CSV, JSON or parquet) and ``nas best RUN_DIR`` (the best
architecture, its export, its test accuracy, the Pareto front). Both only read the run directory."""

from __future__ import annotations

import argparse
import io
import json
import shutil
import sys
from pathlib import Path
from shlex import quote
from typing import Any

from nas.cli.common import UsageError, nonempty, path_arg


def terminal_width() -> int:
    """The terminal's columns ($COLUMNS first); 80 when the output is not a terminal."""
    return shutil.get_terminal_size((80, 24)).columns


def cmd_results(args: argparse.Namespace) -> int:
    from nas.monitor.tables import arch_view, export_frame, json_chunks, results_table
    from nas.run.lock import held
    from nas.run.reader import registered_space
    from nas.run.warmstart import load_run_with_warm

    cfg, df = load_run_with_warm(args.run_dir)
    if args.top < 1:
        raise UsageError(f"--top must be >= 1, got {args.top}")
    objectives = cfg.search.objectives

    def flat() -> Any:  # (the export's columns, one per decision: only for the files and csv/json)
        space = registered_space(cfg)
        return export_frame(df, None if space is None else space.parse, objectives, nested=args.format == "json")

    if args.csv or args.parquet:
        frame = flat()
        for path, write in ((args.csv, frame.to_csv), (args.parquet, _one_type_per_column(frame).to_parquet)):
            if path:
                from nas.run.export import write_export  # (a run's own files refused; atomic: nothing left on failure)

                buffer = io.BytesIO()
                write(buffer, index=False)
                write_export(path, buffer.getvalue())
                print(f"wrote {len(df)} trials to {path}", file=sys.stderr if args.format != "table" else sys.stdout)
        if args.format == "table":
            return 0
    order = (df.sort_values("score", ascending=False, na_position="last", kind="stable").index if args.sort == "score"
             else df.index)  # (stable: a tie is shown in finishing order, the first as nas best names it)
    if args.format == "csv":
        flat().loc[order].to_csv(sys.stdout, index=False)
        return 0
    if args.format == "json":
        for chunk in json_chunks(flat().loc[order]):  # (written as made: not the whole text at once)
            sys.stdout.write(chunk)
        print()
        return 0
    if df.empty:
        print("no finished trials" + ("" if held(args.run_dir) else " (the run is not running: nas status "
                                         f"{quote(str(args.run_dir))} says how it ended)"))
        return 0
    width = terminal_width()
    shown = df.loc[order].head(args.top)
    if args.view == "arch":
        print(arch_view(shown, width, objectives))
        return 0
    table = results_table(shown, width, objectives)
    print(table)
    n_ok = int((df.state == "COMPLETE").sum())
    more = f" (best {args.top} shown; --top N for more)" if len(df) > args.top else ""
    warm = int((df.trial_id < 0).sum())  # (a warm start's trials, told the strategy first: shown with this run's)
    of = (f" ({len(df) - warm} of this run, {warm} of its warm start: ids below 0, which nas best and nas status leave "
          f"out)") if warm else ""
    print(f"\n{len(df)} trials{of}: {n_ok} complete, {len(df) - n_ok} failed{more}")
    if " arch" not in table.splitlines()[0]:
        print(f"architectures: nas results {quote(str(args.run_dir))} --view arch")
    return 0


def cmd_best(args: argparse.Namespace) -> int:
    from nas.run.reader import load_run_records

    if args.pareto or args.export:
        if not args.pareto:
            raise UsageError("--export DIR goes with --pareto (the front's members); for the best trial use "
                             "--export-json / --export-weights")
        from nas.monitor.pareto import cmd_pareto

        return cmd_pareto(args.run_dir, args.export)

    if args.draw and not args.draw.endswith((".html", ".dot")):
        raise UsageError(f"--draw writes .html (interactive, offline) or .dot (Graphviz), got {args.draw!r}")
    cfg, records, df = load_run_records(args.run_dir)
    done = df[df.state == "COMPLETE"]
    if done.empty:
        raise UsageError(f"run {args.run_dir!r} has no completed trial")
    best = done.loc[done.score.idxmax()]
    trial = records[int(done.score.idxmax())][0]  # (row i of the frame is record i)
    from nas.monitor.tables import best_block
    from nas.run.export import write_export  # (a run's own files refused; atomic: nothing left on failure)

    wrote = []  # (the exports first: one that fails is the command's one line, not a line after the block)
    if args.draw:
        write_export(args.draw, draw_best(cfg, best, args.draw, args.run_dir))
        wrote.append(f"wrote {args.draw}")
    if args.export_json:
        write_export(args.export_json, json.dumps(
            {"trial_id": int(best.trial_id), "arch": dict(trial.arch), "arch_str": best.arch,
             "score": float(best.score), "hparams": dict(trial.hparams)}, indent=2).encode())
        wrote.append(f"wrote {args.export_json}")
    if args.export_weights:
        from nas.run.store import best_checkpoint  # (checked to be data: torch.load(weights_only=True))

        write_export(args.export_weights, best_checkpoint(Path(args.run_dir), int(best.trial_id)))
        wrote.append(f"wrote {args.export_weights} (torch.load it: keys model, optimizer, epoch, arch, hparams)")
    print(best_block(best, dict(trial.hparams), cfg.search.objectives, terminal_width()))
    for line in wrote:
        print(line)
    if args.evaluate_test:
        from nas.monitor.testset import evaluate_test

        t = evaluate_test(args.run_dir, int(best.trial_id))
        print(f"test accuracy {t['test_acc']:.4f} (loss {t['test_loss']:.4f}) on {t['test_images']:,} test images, "
              f"for this architecture only: the search never saw the test set")
    return 0


def draw_best(cfg: object, best: object, path: str, run_dir: str) -> bytes:
    """The picture of the best trial's architecture: an HTML page (plotly's JavaScript inside) or DOT text (its
    space's module imported, never from inside ``run_dir``)."""
    from nas.monitor.archdraw import Drawer
    from nas.monitor.archgraph import to_dot

    drawer = Drawer(cfg, allow_import=True, outside=run_dir)  # type: ignore[arg-type]
    title = f"trial {best.trial_id}: {best.arch}"  # type: ignore[attr-defined]
    if path.endswith(".dot"):
        graph = drawer.graph(best.arch)  # type: ignore[attr-defined]
        if graph is None:
            raise UsageError(f"the architecture of trial {best.trial_id} cannot be built to draw it "  # type: ignore[attr-defined]
                             "(its space or dataset is not available here)")
        return to_dot(graph, f"trial {best.trial_id}").encode()  # type: ignore[attr-defined]
    fig = drawer.figure(best.arch, title[:120])  # type: ignore[attr-defined]
    if fig is None:
        raise UsageError(f"the architecture of trial {best.trial_id} cannot be built to draw it "  # type: ignore[attr-defined]
                         "(its space or dataset is not available here)")
    return fig.to_html(include_plotlyjs=True, full_html=True).encode()


def _one_type_per_column(frame: Any) -> Any:
    """``frame`` with each column of values of mixed kinds (a decision whose options are 1 and "1x", or a number and
    a table) as text, which Parquet can store: a column there has one type."""
    out = frame.copy()
    for col in out.columns:
        if out[col].dtype.kind == "O" and len({type(v) for v in out[col].dropna()}) > 1:
            out[col] = out[col].map(lambda v: v if v is None or v != v else str(v))
    return out


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("results", help="a run's trials as a table, CSV or JSON; export CSV/parquet",
                       description="A run's trials: an aligned table with units, or CSV/JSON/parquet with one "
                       "column per decision (arch_*), per hyperparameter (hparams_*) and the measured costs.")
    p.add_argument("run_dir", metavar="RUN_DIR", type=nonempty)
    show = p.add_argument_group("what is printed")
    show.add_argument("--format", choices=["table", "csv", "json"], default="table",
                      help="table (best --top rows, as wide as the terminal), or csv/json (every trial; json with "
                      "nested metrics and history) (default: table)")
    show.add_argument("--view", choices=["table", "arch"], default="table",
                      help="the table, or each architecture in full under its trial (default: table)")
    show.add_argument("--top", type=int, default=50, help="rows of the table (default: 50)")
    show.add_argument("--sort", choices=["score", "finish"], default="score",
                      help="best first, or in finishing order (default: score)")
    files = p.add_argument_group("files written")
    files.add_argument("--csv", metavar="FILE", type=path_arg, help="write every trial to this CSV file")
    files.add_argument("--parquet", metavar="FILE", type=path_arg, help="write every trial to this parquet file")
    p.set_defaults(handler=cmd_results)
    p = sub.add_parser("best", help="a run's best architecture; export it and its weights",
                       description="The run's best trial as a block: its objectives, architecture, hparams, "
                       "costs and metrics; exported, drawn, tested, or the whole Pareto front.")
    p.add_argument("run_dir", metavar="RUN_DIR", type=nonempty)
    out = p.add_argument_group("files written")
    out.add_argument("--export-json", metavar="FILE", type=path_arg, help="write the architecture and hparams as JSON")
    out.add_argument("--export-weights", metavar="FILE", type=path_arg, help="copy its trained weights (torch file)")
    out.add_argument("--draw", metavar="FILE", type=path_arg,
                     help="a picture of its architecture: FILE.html (the built module's "
                     "graph, or the NB201 cell; works offline) or FILE.dot (Graphviz); a module:Class space's "
                     "module is imported")
    more = p.add_argument_group("more")
    more.add_argument("--evaluate-test", action="store_true", help="its accuracy on the dataset's test split "
                      "(rebuilds the run's space: a module:Class space's module is imported)")
    more.add_argument("--pareto", action="store_true",
                      help="list the Pareto front of the run's objectives (trial, each objective, architecture)")
    more.add_argument("--export", metavar="DIR", type=path_arg,
                      help="with --pareto: write DIR/front.json and the members' kept "
                      "weights (DIR/weights/<trial>.pt)")
    p.set_defaults(handler=cmd_best)
