"""``nas bench report-cost``: the driver's marginal CPU time per streamed per-epoch report (Ray).

Two searches (:func:`nas.search`) of the same trials on the same Ray workers, one reporting 1 epoch per trial and
one reporting ``--epochs``; the trials do no work (:func:`quiet_train`), so the difference in the driver's process
time divided by the extra reports is what a report costs (journal line, scheduler decision, the stream item's
callback and fetch), with every per-trial cost cancelled.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from nas.train.context import TrialContext

from . import add_experiment
from .harness import at_least, text_table


def quiet_train(ctx: TrialContext) -> None:
    """A trial that only reports: ``ctx.epochs`` reports, no training."""
    for epoch in range(1, ctx.epochs + 1):
        if ctx.report(epoch=epoch, val_acc=0.5):
            return


def cmd_report_cost(args: argparse.Namespace) -> int:
    at_least(1, trials=args.trials, workers=args.workers, repeats=args.repeats)
    at_least(2, epochs=args.epochs)
    from nas.api import connect

    connect(args.address)
    import nas
    from nas.train.settings import TrainSettings

    def run(epochs: int, trials: int, name: str) -> dict[str, float]:
        cpu, wall = time.process_time(), time.perf_counter()
        df = nas.search("toy", "random", budget=trials, workers=args.workers, seed=0,
                        settings=TrainSettings(epochs=epochs, measure_costs=False), train=quiet_train,
                        run_dir=Path(tmp) / name)
        return {"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall,
                "reports": df.attrs["summary"]["reports"], "loop_ms": 1e3 * df.attrs["summary"]["report_seconds"]}

    out: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        run(2, 4 * args.workers, "warm-up")  # the first search in a process pays one-off imports and caches
        for rep in range(args.repeats):  # alternated, so that a change in the machine's load hits both sides
            for epochs in (1, args.epochs):
                r = run(epochs, args.trials, f"e{epochs}-{rep}")
                if epochs not in out or r["cpu"] < out[epochs]["cpu"]:
                    out[epochs] = r  # the least disturbed of the repeats
    a, b = out[1], out[args.epochs]
    extra = b["reports"] - a["reports"]
    rows = [["reports per trial", "trials", "reports", "driver CPU (s)", "wall (s)", "in _report (ms)"]]
    rows += [[str(e), str(args.trials), str(o["reports"]), f"{o['cpu']:.2f}", f"{o['wall']:.2f}",
              f"{o['loop_ms']:.0f}"] for e, o in out.items()]
    print(f"{args.trials} trials that only report, {args.workers} Ray workers, the fastest of {args.repeats} "
          f"alternated repeats per side; start-up and per-trial costs cancel in the difference")
    print(text_table(rows, rule=True))
    print(f"driver CPU per report: {1e3 * (b['cpu'] - a['cpu']) / extra:.2f} ms "
          f"(wall {1e3 * (b['wall'] - a['wall']) / extra:.2f} ms; of it in the loop's journal + scheduler step "
          f"{(b['loop_ms'] - a['loop_ms']) / extra:.3f} ms); per trial with one report: "
          f"{1e3 * a['cpu'] / args.trials:.2f} ms CPU")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = add_experiment(sub, __doc__, cmd_report_cost)
    p.add_argument("--trials", type=int, default=200, help="trials per run (default 200)")
    p.add_argument("--epochs", type=int, default=20, help="reports per trial in the second run (default 20)")
    p.add_argument("--repeats", type=int, default=2, help="alternated repeats of each side (default 2)")
    p.add_argument("--workers", type=int, default=2, help="Ray trainer actors (default 2)")
    p.add_argument("--address", help="Ray cluster to join (default: start a local one)")
