"""``nas results``: the trials as an aligned text table with units, or as CSV / JSON / parquet with one
column per decision (``arch_<decision>``, as Optuna's ``trials_dataframe`` has ``params_<name>``), one per
hyperparameter (``hparams_<name>``) and the measured costs where the trainer recorded them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pandas as pd

#: metrics keys -> export column and table header (with its unit), where the trainer measured them
COSTS = {"params": ("params", "params"), "flops": ("flops", "FLOPs"), "latency_ms": ("latency_ms", "latency (ms)"),
         "peak_memory_mb": ("peak_memory_mb", "peak mem (MiB)")}


def export_frame(df: pd.DataFrame, parse: Any = None) -> pd.DataFrame:
    """One row per trial, flat: a column per decision and hyperparameter, the measured costs, the rest as
    JSON text (``metrics``, ``history``). ``parse`` a registered space's parser (None: JSON architectures).

    >>> df = pd.DataFrame({"trial_id": [0], "arch": ['{"a": 1}'], "state": ["COMPLETE"], "score": [0.5],
    ...                    "hparams": [{"lr": 0.1}], "metrics": [{"params": 10}], "history": [[]]})
    >>> list(export_frame(df).columns)
    ['trial_id', 'arch', 'state', 'score', 'arch_a', 'hparams_lr', 'params', 'metrics', 'history']
    """
    from nas.monitor.figures import decisions_frame

    out = df.drop(columns=[c for c in ("hparams", "metrics", "history") if c in df])
    decisions = decisions_frame(df, parse).add_prefix("arch_")
    hparams = pd.DataFrame([h if isinstance(h, dict) else {} for h in df.get("hparams", [])], index=df.index)
    metrics = pd.DataFrame([m if isinstance(m, dict) else {} for m in df.get("metrics", [])], index=df.index)
    costs = pd.DataFrame({col: metrics[key] for key, (col, _) in COSTS.items() if key in metrics}, index=df.index)
    parts = [out, decisions, hparams.add_prefix("hparams_"), costs]
    for col in ("metrics", "history"):
        if col in df:
            parts.append(df[col].map(lambda v: json.dumps(v, default=str)).rename(col))
    return pd.concat(parts, axis=1)


def _cell(v: Any, fmt: str = "") -> str:
    if v is None or (not isinstance(v, (str, dict, list)) and pd.isna(v)):
        return "-"
    return format(v, fmt) if fmt else str(v)


def aligned(rows: Sequence[Sequence[str]], numeric: Sequence[bool], width: int | None = None) -> str:
    """Rows as columns (numbers right-aligned, text left), a rule under the header; the last column cut
    so that a line fits ``width``.

    >>> print(aligned([["trial", "arch"], ["7", "a=1"]], [True, False]))
    trial  arch
    -----  ----
        7  a=1
    """
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for k, r in enumerate(rows):
        cells = [c.rjust(w) if num else c.ljust(w) for c, w, num in zip(r, widths, numeric)]
        lines.append("  ".join(cells).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    if width:
        lines = [ln if len(ln) <= width else ln[: width - 3] + "..." for ln in lines]
    return "\n".join(lines)


def _ended(outcome: str, failure: str | None) -> str:
    """Why a trial ended where it did: STOPPED or PAUSED by a scheduler, a failure's kind; - for a full run."""
    return failure if isinstance(failure, str) else "-" if outcome == "COMPLETE" else str(outcome)


def results_table(df: pd.DataFrame, width: int | None = None) -> str:
    """The trials as an aligned table with units: score, epochs trained, why it ended where it did
    (STOPPED or PAUSED by a scheduler, a failure's kind; - for a full run), duration (s), measured costs,
    worker, parent and the architecture."""
    metrics = pd.DataFrame([m if isinstance(m, dict) else {} for m in df.metrics], index=df.index)
    cols: list[tuple[str, bool, list[str]]] = [
        ("trial", True, [str(v) for v in df.trial_id]),
        ("state", False, [str(v) for v in df.state]),
        ("score", True, [_cell(v, ".4f") for v in df.score]),
        ("epochs", True, [_cell(v) for v in df.epochs]),
        ("ended", False, [_ended(o, f) for o, f in zip(df.outcome, df.failure)]),
        ("time (s)", True, [_cell(v, ".1f") for v in df.duration]),
    ]
    for key, (_, header) in COSTS.items():
        if key in metrics and metrics[key].notna().any():
            fmt = ",.0f" if key in ("params", "flops") else ".2f"
            cols.append((header, True, [_cell(v, fmt) for v in metrics[key]]))
    cols += [("worker", False, [_cell(v) for v in df.worker]),
             ("parent", True, [_cell(v) for v in df.parent.astype("object")]),
             ("arch", False, [str(v) for v in df.arch])]
    rows = [[c[0] for c in cols], *zip(*(c[2] for c in cols))]
    return aligned(rows, [c[1] for c in cols], width)
