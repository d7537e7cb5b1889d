"""``nas bench warm-start``: a search warm-started from an earlier run against cold ones (simulated NAS-Bench-201).

On the simulated NAS-Bench-201 (Dong & Yang 2020; the table in ``nas/engine/tabular/data/nb201.csv``, 12-epoch
CIFAR-10 validation accuracy as the reward, the incumbent judged by its 200-epoch accuracy).

Per seed: an earlier run of ``--first`` trials is written to a run directory (``nas.search``, simulated
executor); then, side by side, with the same strategy and options:

- *cold, N*: a fresh search of ``--budget`` trials;
- *warm, N*: a search of ``--budget`` trials whose strategy was first told the earlier run's trials
  (:func:`nas.run.warmstart.load_warm_start` + :func:`~nas.run.warmstart.tell_warm_start`), judged on its
  own trials and on its own plus the warm ones (what the user holds after it);
- *cold, first + N*: one fresh search of the same total number of trials.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

from nas.cli.common import file_arg

from . import add_experiment
from .harness import QUICK_WINS, apply_quick, at_least, simulated_search, strategy_name, text_table, write_json


def incumbent(pairs: list[tuple[Any, Any]]) -> float:
    """The 200-epoch accuracy of the trial with the best reward among ``pairs`` (the table's figure)."""
    best = max((r for _, r in pairs if r.ok), key=lambda r: r.score)
    return float(best.metrics["valid_acc_200"])


def run_seed(strategy: str, seed: int, *, first: int, budget: int, options: dict[str, Any], root: Path
             ) -> dict[str, float]:
    import nas
    from nas.api import make_strategy
    from nas.engine.tabular.nb201_table import NB201Benchmark
    from nas.run.warmstart import load_warm_start, tell_warm_start
    from nas.search_spaces.nb201 import NB201Space

    space = NB201Space()

    def search(n: int, s: int, warm: list[Any] | None = None) -> list[tuple[Any, Any]]:
        strat = make_strategy(strategy, space, seed=s, options=options)
        if warm:
            tell_warm_start(strat, warm)
        return simulated_search(strat, NB201Benchmark("cifar10"), seed=s, budget=n)[0].results()

    run_dir = root / f"first-{seed}"
    nas.search(space, strategy, budget=first, executor="simulated", seed=10_000 + seed, run_dir=run_dir,
               strategy_options=options)
    warm = load_warm_start([run_dir], space_spec=space.spec())
    warm_pairs = [(w.trial, w.result) for w in warm]
    own = search(budget, seed, warm)
    return {"cold": incumbent(search(budget, seed)), "warm_own": incumbent(own),
            "warm_all": incumbent(own + warm_pairs), "cold_total": incumbent(search(first + budget, seed)),
            "first": incumbent(warm_pairs)}


def handler(args: argparse.Namespace) -> int:
    import json

    at_least(1, seeds=args.seeds, first=args.first, budget=args.budget)
    strategy_name(args.strategy)
    apply_quick(args, seeds=2, first=10, budget=10)  # (after the check: a bad value is refused even beside --quick)
    default = {"population": 20, "sample_size": 5} if args.strategy == "evolution" else {}
    try:
        options = json.loads(args.options) if args.options is not None else default
    except json.JSONDecodeError as e:
        raise ValueError(f"--options must be a JSON object, got {args.options!r} ({e.msg} at character {e.pos})"
                         ) from None
    if not isinstance(options, dict):
        raise ValueError(f"--options must be a JSON object, got {args.options!r}")
    print(f"nas bench warm-start: {args.strategy} {options or ''} on the simulated NAS-Bench-201 (CIFAR-10), "
          f"an earlier run of {args.first} trials, then {args.budget} more; {args.seeds} seeds", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [run_seed(args.strategy, s, first=args.first, budget=args.budget, options=options, root=Path(tmp))
                for s in range(args.seeds)]
    labels = [("cold", f"cold, {args.budget} trials"),
              ("warm_own", f"warm ({args.first} told), its {args.budget} trials"),
              ("warm_all", f"warm ({args.first} told), its {args.budget} + the {args.first} told"),
              ("cold_total", f"cold, {args.first + args.budget} trials (same total)"),
              ("first", f"the earlier run alone ({args.first} trials)")]
    table = [["search", "incumbent's 200-epoch accuracy (%), mean ± sd"]]
    for key, label in labels:
        values = [r[key] for r in rows]
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        table.append([label, f"{statistics.fmean(values):.2f} ± {sd:.2f}"])
    print(text_table(table, rule=True))
    write_json(args.json, {"strategy": args.strategy, "options": options, "rows": rows})
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = add_experiment(sub, __doc__, handler)
    p.add_argument("--strategy", default="evolution", help="evolution (default), random, rl or optuna")
    p.add_argument("--options", help='strategy options as JSON (default for evolution: {"population": 20, '
                   '"sample_size": 5})')
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--first", type=int, default=50, help="trials of the earlier run (default 50)")
    p.add_argument("--budget", type=int, default=50, help="trials of the new searches (default 50)")
    p.add_argument("--quick", action="store_true", help="2 seeds, 10 + 10 trials" + QUICK_WINS)
    p.add_argument("--json", metavar="FILE", type=file_arg, help="also write the figures as JSON")
