"""``nas results``: the trials as an aligned text table with units, or as CSV / JSON / parquet with one
column per decision (``arch_<decision>``, as Optuna's ``trials_dataframe`` has ``params_<name>``), one per
hyperparameter (``hparams_<name>``) and the measured costs where the trainer recorded them."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pandas as pd

from nas.core.terminal import visible

#: metrics keys -> export column and table header (with its unit), where the trainer measured them
COSTS = {"params": ("params", "params"), "flops": ("flops", "FLOPs"), "latency_ms": ("latency_ms", "latency (ms)"),
         "peak_memory_mb": ("peak_memory_mb", "peak mem (MiB)")}


def objective_values(df: pd.DataFrame, objectives: Sequence[str] = ()) -> pd.DataFrame:
    """One column per objective, named by its metric, in the metric's own units and sign (a minimised latency
    as a latency, not negated): the result's metric, else its higher-is-better score turned back.

    >>> df = pd.DataFrame({"metrics": [{"val_acc": 0.9}, {}], "scores": [[0.9, -3.0], [0.5, -2.0]],
    ...                    "score": [None, None]})
    >>> objective_values(df, ["val_acc:max", "latency_ms:min"]).to_dict("list")
    {'val_acc': [0.9, 0.5], 'latency_ms': [3.0, 2.0]}
    """
    from nas.core.objectives import Objectives

    obj = Objectives(list(objectives) or ["val_acc:max"])
    out: dict[str, list[float | None]] = {o.metric: [] for o in obj}
    metrics = df["metrics"] if "metrics" in df else pd.Series([{}] * len(df), index=df.index)
    scores = df["scores"] if "scores" in df else pd.Series([None] * len(df), index=df.index)
    for m, sc in zip(metrics, scores):
        m = m if isinstance(m, dict) else {}
        for k, o in enumerate(obj):
            v = m.get(o.metric)
            if not isinstance(v, (int, float)) and isinstance(sc, (list, tuple)) and k < len(sc) and sc[k] is not None:
                v = o.score(float(sc[k]))  # (the score is higher-is-better: a minimised metric flips back)
            out[o.metric].append(float(v) if isinstance(v, (int, float)) else None)
    return pd.DataFrame(out, index=df.index, dtype="float64")


def export_frame(df: pd.DataFrame, parse: Any = None, objectives: Sequence[str] = (), *,
                 nested: bool = False) -> pd.DataFrame:
    """One row per trial, flat: a column per objective (in its own units and sign; ``score`` stays the
    search's higher-is-better scalar), a column per decision and hyperparameter, the measured costs, the rest as
    JSON text (``metrics``, ``history``), or as objects when ``nested`` (for JSON output). ``parse`` a
    registered space's parser (None: JSON architectures).

    >>> df = pd.DataFrame({"trial_id": [0], "arch": ['{"a": 1}'], "state": ["COMPLETE"], "score": [0.5],
    ...                    "hparams": [{"lr": 0.1}], "metrics": [{"params": 10, "val_acc": 0.5}], "history": [[]]})
    >>> list(export_frame(df).columns)
    ['trial_id', 'arch', 'state', 'score', 'val_acc', 'arch_a', 'hparams_lr', 'params', 'metrics', 'history']
    """
    from nas.monitor.figures import decisions_frame

    out = df.drop(columns=[c for c in ("hparams", "metrics", "history", "scores") if c in df])
    values = objective_values(df, objectives)
    decisions = decisions_frame(df, parse).add_prefix("arch_")
    hparams = pd.DataFrame([h if isinstance(h, dict) else {} for h in df.get("hparams", [])], index=df.index)
    metrics = pd.DataFrame([m if isinstance(m, dict) else {} for m in df.get("metrics", [])], index=df.index)
    costs = pd.DataFrame({col: metrics[key] for key, (col, _) in COSTS.items()
                          if key in metrics and key not in values}, index=df.index)
    parts = [out, values, decisions, hparams.add_prefix("hparams_"), costs]
    for col in ("metrics", "history"):
        if col in df:
            parts.append(df[col] if nested else df[col].map(lambda v: json.dumps(v, default=str)).rename(col))
    return pd.concat(parts, axis=1)


def to_json(flat: pd.DataFrame) -> str:
    """Records as JSON with real nested objects (metrics, history) and null for a missing value.

    >>> print(to_json(pd.DataFrame({"a": [float("nan")], "metrics": [{"x": [1, 2]}]})))
    [
     {
      "a": null,
      "metrics": {
       "x": [
        1,
        2
       ]
      }
     }
    ]
    """
    return "".join(json_chunks(flat))


def json_chunks(flat: pd.DataFrame, rows: int = 1_000) -> Iterator[str]:
    """:func:`to_json`'s text in pieces of ``rows`` records, the same text: the whole list and its string at once
    took 11 KB per trial (2.35 GB for 200,000 trials)."""
    yield "["
    for start in range(0, len(flat), rows):
        records = flat.iloc[start:start + rows].to_dict(orient="records")
        yield ",".join("\n " + json.dumps({k: _plain(v) for k, v in row.items()}, indent=1, default=str,
                                           allow_nan=False).replace("\n", "\n ") for row in records)
        if start + rows < len(flat):
            yield ","
    yield "\n]" if len(flat) else "]"


def _plain(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        v = v.item()  # numpy scalars
    if isinstance(v, float) and v != v:
        return None
    if v is pd.NA or v is pd.NaT:
        return None
    return v


def _cell(v: Any, fmt: str = "") -> str:
    if v is None or (not isinstance(v, (str, dict, list)) and pd.isna(v)):
        return "-"
    return format(v, fmt) if fmt else str(v)


def aligned(rows: Sequence[Sequence[str]], numeric: Sequence[bool], width: int | None = None) -> str:
    """Rows as columns (numbers right-aligned, text left), a rule under the header; the last column cut
    so that a line fits ``width``. Each cell's control characters are shown (:func:`nas.core.terminal.visible`).

    >>> print(aligned([["trial", "arch"], ["7", "a=1"]], [True, False]))
    trial  arch
    -----  ----
        7  a=1
    """
    rows = [[visible(c) for c in r] for r in rows]
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


#: which columns stay when the terminal is narrow, most needed first (the objectives come right after trial)
PRIORITY = ["trial", "@objectives", "state", "epochs", "ended", "time (s)", "params", "latency (ms)", "parent",
            "worker", "FLOPs", "peak mem (MiB)", "arch"]


def fit_columns(cols: Sequence[tuple[str, bool, list[str]]], width: int | None,
                order: Sequence[str]) -> list[tuple[str, bool, list[str]]]:
    """The columns (in their own order) that fit ``width`` with two spaces between, taken by ``order``.

    >>> cols = [("a", True, ["1"]), ("bbbbbbbb", False, ["x"]), ("c", True, ["2"])]
    >>> [c[0] for c in fit_columns(cols, 6, ["a", "c", "bbbbbbbb"])]
    ['a', 'c']
    """
    if not width:
        return list(cols)
    size = {c[0]: max([len(c[0]), *map(len, c[2])]) for c in cols}
    keep: set[str] = set()
    used = -2
    for name in order:
        if name in size and name not in keep and used + 2 + size[name] <= width:
            keep.add(name)
            used += 2 + size[name]
    return [c for c in cols if c[0] in keep]


def results_table(df: pd.DataFrame, width: int | None = None, objectives: Sequence[str] = ()) -> str:
    """The trials as an aligned table with units: one column per objective (named by its metric, in its own
    units), epochs trained, why it ended where it did (STOPPED or PAUSED by a scheduler, a failure's kind; - for
    a full run), duration (s), measured costs, worker, parent and the architecture. Given a ``width``, only the
    columns that fit it are shown, the most needed first; the architecture only when it fits whole (else
    ``nas results --view arch`` shows it)."""
    metrics = pd.DataFrame([m if isinstance(m, dict) else {} for m in df.metrics], index=df.index)
    values = objective_values(df, objectives)
    cols: list[tuple[str, bool, list[str]]] = [("trial", True, [str(v) for v in df.trial_id])]
    cols += [(name, True, [_cell(v, ".4g") for v in values[name]]) for name in values]
    cols += [
        ("state", False, [str(v) for v in df.state]),
        ("epochs", True, [_cell(v) for v in df.epochs]),
        ("ended", False, [_ended(o, f) for o, f in zip(df.outcome, df.failure)]),
        ("time (s)", True, [_cell(v, ".1f") for v in df.duration]),
    ]
    for key, (_, header) in COSTS.items():
        if key in metrics and key not in values and metrics[key].notna().any():
            fmt = ",.0f" if key in ("params", "flops") else ".2f"
            cols.append((header, True, [_cell(v, fmt) for v in metrics[key]]))
    cols += [("worker", False, [_cell(v) for v in df.worker]),
             ("parent", True, [_cell(v) for v in df.parent.astype("object")]),
             ("arch", False, [str(v) for v in df.arch])]
    order = [n for p in PRIORITY for n in (list(values) if p == "@objectives" else [p])]
    cols = fit_columns(cols, width, order)
    rows = [[c[0] for c in cols], *zip(*(c[2] for c in cols))]
    return aligned(rows, [c[1] for c in cols], width)


def wrap_arch(text: str, width: int) -> list[str]:
    """An architecture's text in lines of at most ``width``, broken after ``|``, ``+`` or ``,`` where it can.

    >>> wrap_arch("|a~0|+|b~0|c~1|", 8)
    ['|a~0|+|', 'b~0|c~1|']
    """
    import re

    lines, line = [], ""
    for token in re.split(r"(?<=[|,+])", text):
        while len(token) > width:  # (one token longer than a line: cut it)
            if line:
                lines.append(line)
                line = ""
            lines.append(token[:width])
            token = token[width:]
        if len(line) + len(token) > width and line:
            lines.append(line)
            line = ""
        line += token
    return [*lines, line] if line else lines or [""]


def arch_view(df: pd.DataFrame, width: int | None = None, objectives: Sequence[str] = ()) -> str:
    """Each trial's architecture in full, wrapped to ``width`` under a line with its trial and objectives.

    >>> df = pd.DataFrame({"trial_id": [3], "arch": ["|a~0|+|b~0|c~1|"], "metrics": [{"val_acc": 0.5}]})
    >>> print(arch_view(df, 12))
    trial 3  val_acc 0.5
      |a~0|+|
      b~0|c~1|
    """
    values = objective_values(df, objectives)
    blocks = []
    for (_, row), (_, vals) in zip(df.iterrows(), values.iterrows(), strict=True):
        head = visible("  ".join([f"trial {row.trial_id}", *(f"{k} {_cell(v, '.4g')}" for k, v in vals.items())]))
        text = visible(row.arch)
        lines = wrap_arch(text, (width or 10**6) - 2)
        blocks.append("\n".join([head, *("  " + ln for ln in lines)]))
    return "\n".join(blocks)


def best_block(row: Any, hparams: dict[str, Any], objectives: Sequence[str], width: int | None = None) -> str:
    """``nas best``: the trial as a block of labelled lines, the objectives first in their own units.

    >>> row = pd.Series({"trial_id": 4, "arch": "a=1", "epochs": 3, "duration": 2.5, "outcome": "COMPLETE",
    ...                  "metrics": {"val_acc": 0.91, "params": 1200, "train_loss": 0.2}, "scores": [0.91]})
    >>> print(best_block(row, {"lr": 0.01}, ["val_acc:max"]))
    best trial 4
      val_acc        0.91 (max)
      architecture   a=1
      hparams        lr=0.01
      epochs         3 (2.5 s)
      params         1,200
      train_loss     0.2
    """
    frame = pd.DataFrame([row.to_dict()])
    values = objective_values(frame, objectives).iloc[0]
    metrics = row.metrics if isinstance(row.metrics, dict) else {}
    pad = max([14, *(len(visible(k)) for k in metrics)])
    modes = {o.split(":")[0]: (o.split(":") + ["max"])[1] for o in (list(objectives) or ["val_acc:max"])}
    lines = [f"best trial {row.trial_id}"]

    def add(key: str, text: str) -> None:  # (the run's text: its control characters shown)
        key, text = visible(key), visible(text)
        wrapped = wrap_arch(text, max((width or 10**6) - pad - 3, 20))
        lines.append(f"  {key:<{pad}} {wrapped[0]}")
        lines.extend(" " * (pad + 3) + more for more in wrapped[1:])

    for name, v in values.items():
        add(str(name), f"{_cell(v, '.4g')} ({modes.get(str(name), 'max')})")
    add("architecture", str(row.arch))
    if hparams:
        add("hparams", ", ".join(f"{k}={v}" for k, v in hparams.items()))
    took = f" ({row.duration:.1f} s)" if isinstance(row.get("duration"), float) and row.duration == row.duration else ""
    add("epochs", f"{_cell(row.epochs)}{took}")
    for key, v in metrics.items():
        if key in values.index or key == "epochs":
            continue
        fmt = ",.0f" if key in ("params", "flops") else ".4g"
        if isinstance(v, dict):
            text = ", ".join(f"{k}={x}" for k, x in v.items())
        else:
            text = _cell(v, fmt) if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)
        add(str(key), text)
    return "\n".join(lines)
