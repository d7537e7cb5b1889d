"""The Table 5 protocol of ``nas bench strategies --protocol table5``: each run searched on CIFAR-10; the one cell it
found judged on CIFAR-10, CIFAR-100 and ImageNet16-120 (200-epoch validation accuracy, the table's mean over seeds),
beside the paper's rows (Dong & Yang 2020, Table 5, validation: mean +- std over 500 runs).

>>> from nas_benchmarks.nb201_strategies import SearchOutcome
>>> runs = [SearchOutcome("evolution", s, trials=90, best_index=1, evals_to_pick=40,
...                       valid200_all={"cifar10": 91.0 + s, "cifar100": 71.0, "imagenet16": 45.0}) for s in (0, 1)]
>>> print(format_table5(table5_rows(runs)).splitlines()[2])
evolution         2    90.0  91.50 +- 0.50  71.00 +- 0.00  45.00 +- 0.00     40.0     0.000    0.00
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

DATASETS = ("cifar10", "cifar100", "imagenet16")

#: NAS-Bench-201, Table 5: validation accuracy (%) after 200 epochs of the cell each method found,
#: searching on CIFAR-10, mean +- std over 500 runs; "optimum" is the best cell of the benchmark.
PUBLISHED: dict[str, dict[str, tuple[float, float]]] = {
    "cifar10": {"REA": (91.19, 0.31), "REINFORCE": (91.09, 0.37), "RS": (90.93, 0.36), "BOHB": (90.82, 0.53),
                "optimum": (91.61, 0.0)},
    "cifar100": {"REA": (71.81, 1.12), "REINFORCE": (71.61, 1.12), "RS": (70.93, 1.09), "BOHB": (70.74, 1.29),
                 "optimum": (73.49, 0.0)},
    "imagenet16": {"REA": (45.15, 0.89), "REINFORCE": (45.05, 1.02), "RS": (44.45, 1.10), "BOHB": (44.26, 1.36),
                   "optimum": (46.77, 0.0)},
}
#: our strategy -> the paper's method it implements
PAPER_NAME = {"evolution": "REA", "rl": "REINFORCE", "random": "RS"}




def table5_rows(outcomes: Sequence[Any]) -> list[dict[str, Any]]:
    """Per strategy: runs, trials, evaluations to the pick, ms per trial (and fitting), and mean +- std of the
    pick's accuracy on each dataset; then the paper's rows and the optimum of each dataset."""
    from nas.engine.tabular.nb201_table import load_table

    rows: list[dict[str, Any]] = []
    for name in dict.fromkeys(o.method for o in outcomes):
        runs = [o for o in outcomes if o.method == name]
        ok = [o for o in runs if not o.not_applicable and o.best_index >= 0]
        if not ok:
            rows.append({"strategy": name, "note": "n/a: " + (runs[0].not_applicable if runs else "no runs")})
            continue
        trials = sum(o.trials for o in ok)
        acc = {d: (float(np.mean([o.valid200_all[d] for o in ok])), float(np.std([o.valid200_all[d] for o in ok])))
               for d in DATASETS}
        rows.append({"strategy": name, "runs": len(ok), "trials": float(np.mean([o.trials for o in ok])), "acc": acc,
                     "evals_to_pick": float(np.mean([o.evals_to_pick for o in ok])),
                     "ms": 1e3 * sum(o.strategy_seconds for o in ok) / trials,
                     "fit_ms": 1e3 * sum(o.fit_seconds for o in ok) / trials, "paper": PAPER_NAME.get(name, "")})
    for paper in ("REA", "RS", "REINFORCE", "BOHB"):
        rows.append({"strategy": f"paper {paper}", "acc": {d: PUBLISHED[d][paper] for d in DATASETS}})
    table = load_table()
    rows.append({"strategy": "optimum", "acc": {d: (float(table.valid200[d].max()), 0.0) for d in DATASETS}})
    return rows


def format_table5(rows: Sequence[Mapping[str, Any]]) -> str:
    head = (f"{'strategy':15s} {'runs':>3s} {'trials':>7s} " + " ".join(f"{d + ' (%)':>14s}" for d in DATASETS)
            + f" {'to pick':>8s} {'ms/trial':>9s} {'fit ms':>7s}")
    lines = [head, "-" * len(head)]
    for r in rows:
        if "note" in r:
            lines.append(f"{r['strategy']:15s} {r['note']}")
            continue
        acc = " ".join(f"{r['acc'][d][0]:6.2f} +- {r['acc'][d][1]:4.2f}" if r['acc'][d][1] or "runs" in r
                       else f"{r['acc'][d][0]:14.2f}" for d in DATASETS)
        if "runs" in r:
            lines.append(f"{r['strategy']:15s} {r['runs']:3d} {r['trials']:7.1f} {acc} {r['evals_to_pick']:8.1f} "
                         f"{r['ms']:9.3f} {r['fit_ms']:7.2f}")
        else:
            lines.append(f"{r['strategy']:15s} {'':3s} {'':7s} {acc}")
    return "\n".join(lines)
