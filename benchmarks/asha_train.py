"""``nas bench asha-train``: what early stopping saves in real training, evolution + ASHA against evolution alone.

Real training of the macro space on the built-in digits data (CPU here), regularized evolution with ASHA (stopping
variant; default eta 3, rungs 1, 3, 9) against evolution alone, the same number of candidates and seeds on both
sides, run one after the other on the same Ray workers (each a search through :func:`nas.search`): best validation
accuracy, total epochs trained, search wall time (worker start-up excluded on both sides: the pool starts before
the loop's clock does).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import add_experiment
from .harness import text_table


def _search(*, scheduler: str, seed: int, budget: int, epochs: int, workers: int, root: Path,
            options: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    import nas
    from nas.train.settings import TrainSettings

    settings = TrainSettings(epochs=epochs, seed=seed, measure_costs=False)
    cpu = time.process_time()
    df = nas.search("macro", "evolution", budget=budget, workers=workers, seed=seed, settings=settings,
                    strategy_options={"population": max(4, budget // 3), "sample_size": 3},
                    scheduler=scheduler, scheduler_options=options or {},
                    run_dir=root / f"{scheduler}-{seed}-{time.monotonic_ns()}", **kw)
    s = df.attrs["summary"]
    return {"best": float(df.score.max()), "epochs": int(df.epochs.sum()), "wall": s["wall_seconds"],
            "reports": s["reports"], "report_ms": 1e3 * s["report_seconds"] / max(s["reports"], 1),
            "cpu": time.process_time() - cpu, "stopped": int((df.outcome == "STOPPED").sum())}


def cmd_asha_train(args: argparse.Namespace) -> int:
    if args.seeds < 1 or args.budget < 2 or args.epochs < 3 or args.workers < 1:
        raise ValueError(f"need --seeds >= 1, --budget >= 2, --epochs >= 3, --workers >= 1; got {args.seeds}, "
                         f"{args.budget}, {args.epochs}, {args.workers}")
    if not 1 < args.eta < float("inf") or not 1 <= args.grace_period <= args.epochs:
        raise ValueError(f"need --eta a finite number > 1 and --grace-period in 1..--epochs ({args.epochs}); got "
                         f"{args.eta}, {args.grace_period}")
    from nas.api import connect

    connect(args.address)
    rows, runs = [["seed", "side", "best val acc", "epochs trained", "stopped", "wall (s)", "driver ms/report"]], []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            for side in ("none", "asha"):
                r = _search(scheduler=side, seed=seed, budget=args.budget, epochs=args.epochs,
                            workers=args.workers, root=Path(tmp),
                            options={"eta": args.eta, "grace_period": args.grace_period} if side == "asha" else None)
                runs.append((side, r))
                rows.append([str(seed), "evolution" + (" + asha" if side == "asha" else ""), f"{r['best']:.4f}",
                             str(r["epochs"]), str(r["stopped"]), f"{r['wall']:.1f}", f"{r['report_ms']:.2f}"])
                print(f"seed {seed} {side}: best {r['best']:.4f}, {r['epochs']} epochs, {r['wall']:.1f} s",
                      file=sys.stderr, flush=True)
    print(f"macro space on digits, {args.budget} candidates x {args.epochs} epochs, {args.workers} Ray workers, "
          f"{args.seeds} seeds; ASHA: stopping, eta {args.eta:g}, grace period {args.grace_period}")
    print(text_table(rows, rule=True))
    by = {side: [r for s, r in runs if s == side] for side in ("none", "asha")}
    mean = {side: {k: statistics.fmean(r[k] for r in rs) for k in ("best", "epochs", "wall")}
            for side, rs in by.items()}
    sd = {side: statistics.pstdev(r["best"] for r in rs) for side, rs in by.items()}
    print(f"mean best val acc: evolution {mean['none']['best']:.4f} (sd {sd['none']:.4f}), "
          f"evolution + asha {mean['asha']['best']:.4f} (sd {sd['asha']:.4f})")
    print(f"evolution + asha / evolution: epochs trained {mean['asha']['epochs'] / mean['none']['epochs']:.2f}x, "
          f"wall time {mean['asha']['wall'] / mean['none']['wall']:.2f}x")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = add_experiment(sub, __doc__, cmd_asha_train)
    p.add_argument("--seeds", type=int, default=3, help="seeds per side (default 3)")
    p.add_argument("--budget", type=int, default=12, help="candidates per search (default 12)")
    p.add_argument("--epochs", type=int, default=9, help="epochs of a full trial, ASHA's max (default 9)")
    p.add_argument("--workers", type=int, default=2, help="Ray trainer actors (default 2)")
    p.add_argument("--eta", type=float, default=3, help="ASHA's reduction factor (default 3)")
    p.add_argument("--grace-period", type=int, default=1, help="ASHA's first rung, in epochs (default 1)")
    p.add_argument("--address", help="Ray cluster to join (default: start a local one)")
