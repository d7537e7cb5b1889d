"""Views of a run with a scheduler (ASHA, Hyperband, median stopping): trials per rung, and best-so-far at the
highest fidelity.

A rung is an epoch count at which a scheduler stopped some trial (``outcome`` STOPPED or PAUSED with that many
``epochs``), and the full budget (the most epochs any trial trained). For each rung: how many trials reached it
(trained at least that many epochs), how many were stopped there and how many went on (promoted). A score after
one epoch and one after nine are not comparable, so the best-so-far line counts only the trials that trained
the most epochs; the others are drawn apart, marked by their epochs.

>>> df = pd.DataFrame({"epochs": [1, 1, 3, 3, 9], "outcome": ["STOPPED", "STOPPED", "STOPPED", "COMPLETE",
...                    "COMPLETE"], "state": ["COMPLETE"] * 5})
>>> rung_table(df).to_dict("records")  # doctest: +NORMALIZE_WHITESPACE
[{'rung (epochs)': 1, 'reached': 5, 'stopped here': 2, 'promoted': 3},
 {'rung (epochs)': 3, 'reached': 3, 'stopped here': 1, 'promoted': 1},
 {'rung (epochs)': 9, 'reached': 1, 'stopped here': 0, 'promoted': 0}]
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from nas.core.objectives import Objective
from nas.monitor.figures import literal, objective_label

EARLY = ("STOPPED", "PAUSED")


def has_rungs(df: pd.DataFrame) -> bool:
    """Whether a scheduler ended any trial early (a rung view says something)."""
    return bool(len(df)) and "outcome" in df and bool(df.outcome.isin(EARLY).any())


def rung_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per rung: its epochs, trials that reached it, stopped there, went on beyond it."""
    ran = df[df.epochs.notna()]
    epochs = ran.epochs.astype(int)
    rungs = sorted({*epochs[ran.outcome.isin(EARLY)], int(epochs.max())}) if len(ran) else []
    rows = []
    for r in rungs:
        reached = int((epochs >= r).sum())
        stopped = int(((epochs == r) & ran.outcome.isin(EARLY)).sum())
        rows.append({"rung (epochs)": r, "reached": reached, "stopped here": stopped,
                     "promoted": int((epochs > r).sum())})
    return pd.DataFrame(rows, columns=["rung (epochs)", "reached", "stopped here", "promoted"])


def rung_figure(df: pd.DataFrame) -> go.Figure | None:
    """Bars per rung: reached, stopped there, promoted."""
    table = rung_table(df)
    if table.empty or not has_rungs(df):
        return None
    fig = go.Figure()
    x = [f"{r} epochs" for r in table["rung (epochs)"]]
    for col, color in (("reached", "#4c78a8"), ("stopped here", "#e45756"), ("promoted", "#54a24b")):
        fig.add_bar(x=x, y=table[col], name=col, marker_color=color)
    fig.update_layout(title="Trials per rung", barmode="group", template="plotly_white", height=360,
                      xaxis_title="rung", yaxis_title="trials", margin={"l": 60, "r": 20, "t": 50, "b": 50})
    return fig


def best_at_full_fidelity(df: pd.DataFrame, t_end: pd.Series, values: pd.Series, objective: str) -> go.Figure | None:
    """Best-so-far of ``objective`` (``metric:mode``; ``values`` its value per row, in its own units) over the trials
    that trained the most epochs; trials stopped earlier drawn apart, by epochs."""
    o = Objective.parse(objective)
    metric = literal(o.metric)  # (the run's text, shown as it is)
    done = df.assign(t_end=t_end, score=values)  # (here "score": the objective in its own units)
    done = done[(done.state == "COMPLETE") & done.score.notna()]
    if done.empty:
        return None
    top = int(done.epochs.max())
    full = done[done.epochs == top].sort_values("t_end")
    fig = go.Figure()
    for e, part in done[done.epochs < top].groupby("epochs"):
        fig.add_scatter(x=part.t_end, y=part.score, mode="markers", opacity=0.45, name=f"stopped at {int(e)} epochs",
                        marker={"size": 6, "symbol": "circle-open"}, customdata=np.stack([part.trial_id], axis=1),
                        hovertemplate=f"trial %{{customdata[0]}}<br>{metric} %{{y:.4g}}<extra></extra>")
    if len(full):
        fig.add_scatter(x=full.t_end, y=full.score, mode="markers", name=f"{top} epochs (full)",
                        marker={"size": 7}, customdata=np.stack([full.trial_id], axis=1),
                        hovertemplate=f"trial %{{customdata[0]}}<br>{metric} %{{y:.4g}}<extra></extra>")
        best = full.score.cummax() if o.mode == "max" else full.score.cummin()
        fig.add_scatter(x=full.t_end, y=best, mode="lines", line={"shape": "hv", "width": 3},
                        name=f"best so far at {top} epochs")
    fig.update_layout(title=f"Best {metric} so far at the highest fidelity ({top} epochs); others marked",
                      template="plotly_white", height=380, xaxis_title="seconds since the first trial started",
                      yaxis_title=literal(objective_label(o)), margin={"l": 60, "r": 20, "t": 50, "b": 50})
    return fig


__all__ = ["best_at_full_fidelity", "has_rungs", "rung_figure", "rung_table"]
