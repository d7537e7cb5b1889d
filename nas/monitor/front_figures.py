"""The report's multi-objective plots: every trial with the Pareto front highlighted, and the hypervolume
(and the front's size) against time. Both from the results frame of :func:`nas.run.reader.load_run` and the run's
objectives (run.json ``objectives``), via :mod:`nas.core.front`; None when there is nothing to draw.

>>> import pandas as pd
>>> df = pd.DataFrame({"trial_id": [0, 1, 2], "state": "COMPLETE", "arch": ["a", "b", "c"],
...                    "start_time": [0.0, 1.0, 2.0], "end_time": [1.0, 2.0, 3.0],
...                    "metrics": [{"acc": 0.9, "ms": 12.0}, {"acc": 0.8, "ms": 5.0}, {"acc": 0.7, "ms": 13.0}]})
>>> fig = front_scatter(df, ["acc", "ms:min"])
>>> [(t.name, list(t.customdata[:, 0])) for t in fig.data]
[('every trial', [0, 1, 2]), ('Pareto front', [1, 0])]
>>> hv = list(hypervolume_figure(df, ["acc", "ms:min"]).data[0].y)
>>> len(hv), hv == sorted(hv)
(3, True)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from nas.core.front import hypervolume_over_time, objective_frame, pareto_front
from nas.core.objectives import Objectives
from nas.monitor.figures import _layout, literal, literals, objective_label, timed


def front_scatter(df: pd.DataFrame, objectives: Sequence[str] | Objectives) -> go.Figure | None:
    """Every ranked trial (second objective across, first up; a third, if any, as colour) and the front's
    members on top, joined in order of the second objective when there are exactly two objectives."""
    obj = objectives if isinstance(objectives, Objectives) else Objectives(objectives)
    ranked = objective_frame(df, obj)
    if ranked.empty:
        return None
    y, x = obj.objectives[0], obj.objectives[1]
    front = pareto_front(df, obj).sort_values(x.metric, kind="stable")
    colour = obj.objectives[2].metric if len(obj) > 2 else None
    fig = go.Figure()
    for frame, name, marker, mode in (
            (ranked, "every trial", {"size": 7, "color": "#9aa5b1", "opacity": 0.6}, "markers"),
            (front, "Pareto front", {"size": 11, "color": "#d62728", "line": {"width": 1, "color": "#222"}},
             "lines+markers" if len(obj) == 2 else "markers")):
        if colour is not None and name == "every trial":
            marker = {**marker, "color": frame[colour], "colorscale": "Viridis", "showscale": True,
                      "colorbar": {"title": literal(colour)}}
        extra = "".join(f"<br>{literal(o.metric)} %{{customdata[{i + 2}]:.4g}}" for i, o in enumerate(obj))
        fig.add_scatter(x=frame[x.metric], y=frame[y.metric], mode=mode, name=name, marker=marker,
                        line={"shape": "hv" if x.mode == "min" else "vh", "width": 2},  # the front's staircase
                        customdata=np.column_stack([frame.trial_id.to_numpy(),
                                                    np.array(literals(frame.arch), dtype=object),
                                                    *[frame[o.metric].to_numpy() for o in obj]]),
                        hovertemplate=f"trial %{{customdata[0]}}{extra}<br>%{{customdata[1]}}<extra>{name}</extra>")
    n_failed = int((df.state == "FAILED").sum()) if "state" in df else 0
    title = (f"Pareto front: {len(front)} of {len(ranked)} trials"
             + (f" ({n_failed} FAILED or infeasible, never on it)" if n_failed else ""))
    return _layout(fig, title, objective_label(x), objective_label(y))


def hypervolume_figure(df: pd.DataFrame, objectives: Sequence[str] | Objectives) -> go.Figure | None:
    """The hypervolume of the front found so far (against the run's own reference point, so it never falls)
    and the front's size, against seconds since the first trial started."""
    obj = objectives if isinstance(objectives, Objectives) else Objectives(objectives)
    d = timed(df) if "start_time" in df and len(df) else df
    curve = hypervolume_over_time(d.assign(end_time=d.t_end) if "t_end" in d else d, obj)
    if curve.empty:
        return None
    fig = go.Figure()
    fig.add_scatter(x=curve.end_time, y=curve.hypervolume, mode="lines+markers", name="hypervolume",
                    line={"shape": "hv", "width": 3}, customdata=curve.trial_id,
                    hovertemplate="after trial %{customdata}<br>%{x:.1f} s<br>hypervolume %{y:.6g}<extra></extra>")
    fig.add_scatter(x=curve.end_time, y=curve.front_size, mode="lines", name="front size", yaxis="y2",
                    line={"shape": "hv", "dash": "dot"})
    return _layout(fig, "Hypervolume of the front found so far", "seconds since the first trial started",
                   "hypervolume", yaxis2={"title": "front size (trials)", "overlaying": "y", "side": "right",
                                          "rangemode": "tozero", "tickformat": "d", "dtick": max(1, len(curve) // 50),
                                          "showgrid": False})


__all__ = ["front_scatter", "hypervolume_figure"]
