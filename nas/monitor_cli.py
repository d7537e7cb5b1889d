"""``nas status RUN_DIR`` (a live summary) and ``nas report RUN_DIR`` (an HTML page with plots)."""

from __future__ import annotations

import argparse
import time


def cmd_status(args: argparse.Namespace) -> int:
    from nas.status import format_status, run_status

    if args.watch is not None and not args.watch > 0:
        raise ValueError(f"--watch must be a number of seconds > 0, got {args.watch!r}")
    while True:
        st = run_status(args.run_dir)
        print(format_status(st), flush=True)
        if args.watch is None or st["state"] != "running":
            return 0
        time.sleep(args.watch)  # the refresh period the user asked for
        print(flush=True)


def cmd_report(args: argparse.Namespace) -> int:
    from nas.report import write_report

    if args.top < 1:
        raise ValueError(f"--top must be >= 1, got {args.top}")
    path = write_report(args.run_dir, args.out, top=args.top)
    print(f"wrote {path}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="a run's progress: trials by state, best so far, throughput, ETA")
    p.add_argument("run_dir")
    p.add_argument("--watch", type=float, metavar="SECONDS",
                   help="print again every SECONDS until the run is no longer running")
    p.set_defaults(handler=cmd_status)
    p = sub.add_parser("report", help="an HTML page with plots and the top trials of a run")
    p.add_argument("run_dir")
    p.add_argument("--out", metavar="FILE", help="where to write it (default RUN_DIR/report.html)")
    p.add_argument("--top", type=int, default=10, help="rows in the top-trials table (default 10)")
    p.set_defaults(handler=cmd_report)
