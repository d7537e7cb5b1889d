"""``nas status RUN_DIR`` (a live summary) and ``nas report RUN_DIR ...`` (an interactive HTML page)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path
from typing import TextIO

from nas.cli.common import nonempty, path_arg

CLEAR_BELOW = "\x1b[J"


def redraw(stream: TextIO, block: str, drawn: int) -> int:
    """Draw ``block`` over the ``drawn`` lines drawn before (a terminal: cursor up, clear, write; each line
    cut to the width so that none wraps); the number of lines now drawn."""
    width = shutil.get_terminal_size((100, 24)).columns
    lines = [line[: width - 1] for line in block.splitlines()]
    up = f"\x1b[{drawn}A\r" if drawn else ""
    stream.write(up + CLEAR_BELOW + "\n".join(lines) + "\n")
    stream.flush()
    return len(lines)


def cmd_status(args: argparse.Namespace) -> int:
    from nas.monitor.status import format_status, run_status
    from nas.run.journal import ResultsTail
    from nas.run.store import JOURNAL

    if args.watch is not None and not 0 < args.watch < float("inf"):
        raise ValueError(f"--watch must be a finite number of seconds > 0, got {args.watch!r}")
    tty = args.watch is not None and sys.stdout.isatty()
    drawn, tail = 0, ResultsTail(Path(args.run_dir) / JOURNAL)  # (each redraw reads what was appended since)
    while True:
        st = run_status(args.run_dir, tail=tail)
        if tty:
            drawn = redraw(sys.stdout, format_status(st), drawn)
        else:
            print(format_status(st), flush=True)
        if args.watch is None or st["state"] != "running":
            return 0
        time.sleep(args.watch)  # the refresh period the user asked for
        if not tty:
            print(flush=True)  # a log: blocks one after another, a blank line between


def cmd_report(args: argparse.Namespace) -> int:
    from nas.monitor.page import write_report

    if args.top < 1:
        raise ValueError(f"--top must be >= 1, got {args.top}")
    seen: dict[str, str] = {}
    for run in args.run_dirs:  # (the same run twice drew a comparison of it with itself)
        real = os.path.realpath(run)
        if real in seen:
            raise ValueError(f"{run!r} names the same run as {seen[real]!r}; compare different runs")
        seen[real] = run
    path = write_report(args.run_dirs, args.out, top=args.top)
    print(f"wrote {path}")
    return 0


def grafana_dashboard() -> str:
    """The Grafana dashboard shipped in the package (a copy of dashboards/nas.json)."""
    from importlib.resources import files

    return files("nas.monitor").joinpath("grafana.json").read_text(encoding="utf-8")


def cmd_dashboard(args: argparse.Namespace) -> int:
    if not args.grafana:
        raise ValueError("say which dashboard: --grafana (the Grafana JSON, to import into Grafana)")
    sys.stdout.write(grafana_dashboard())
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from nas.monitor.live import LiveServer

    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be in 0..65535, got {args.port}")
    if not (args.refresh >= 1 and args.refresh.is_integer()):  # (inf and nan are not integers)
        raise ValueError(f"--refresh must be a whole number of seconds >= 1 (a browser reloads a page after whole "
                         f"seconds: 0.5 is 0, a reload loop), got {args.refresh}")
    server = LiveServer(args.run_dir, args.port, refresh=args.refresh)
    print(f"serving {args.run_dir} on 127.0.0.1 only; open (the URL carries a secret token and sets it as a "
          f"cookie):\n{server.url}", flush=True)
    try:
        server.serve_forever()
    finally:
        server.shutdown()
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dashboard", help="print the Grafana dashboard of the search metrics (JSON)",
                       description="Print the Grafana dashboard that plots the search metrics Ray exports: "
                       "nas dashboard --grafana > nas.json, then import nas.json in Grafana.")
    p.add_argument("--grafana", action="store_true", help="the Grafana dashboard JSON")
    p.set_defaults(handler=cmd_dashboard)
    p = sub.add_parser("status", help="a run's progress: trials by state, best so far, throughput, ETA",
                       description="A run's progress from its directory, while it runs or after.")
    p.add_argument("run_dir", metavar="RUN_DIR", type=nonempty)
    p.add_argument("--watch", type=float, metavar="SECONDS",
                   help="redraw every SECONDS until the run is no longer running (in place on a terminal)")
    p.set_defaults(handler=cmd_status)
    p = sub.add_parser("report", help="an interactive HTML page about one run, or comparing several",
                       description="Write one self-contained HTML page (works offline) with interactive plots "
                       "of a run, or of several runs side by side.")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", type=nonempty)
    p.add_argument("--out", metavar="FILE", type=path_arg,
                   help="where to write it (default: RUN_DIR/report.html of the first run)")
    p.add_argument("--top", type=int, default=10, help="best architectures drawn and listed first (default: 10)")
    p.set_defaults(handler=cmd_report)
    p = sub.add_parser("serve",
                       help="a run's live page in the browser, on 127.0.0.1 (a printed URL with a secret token)",
                       description="Serve the run's report as a live page on 127.0.0.1 while it runs: what is "
                       "running now, the report's views (reloaded every --refresh seconds), a page per trial. "
                       "Only requests with the printed URL's token are answered. Ctrl-C stops it.")
    p.add_argument("run_dir", metavar="RUN_DIR", type=nonempty)
    p.add_argument("--port", type=int, default=0, help="the port (default: a free one)")
    p.add_argument("--refresh", type=float, default=5.0, help="whole seconds between reloads of the page (default: 5)")
    p.set_defaults(handler=cmd_serve)
