"""The report's interactive plots (plotly figures), each from the results frame of :func:`nas.run.reader.load_run`.

Times are seconds since the run's first trial started. Every function returns a ``plotly`` figure or
None when the run holds nothing to draw (the page says so instead). A view of trials' results draws one
objective (``metric:mode``) in its own units, its values given by the caller (one per row of the results frame:
:func:`nas.monitor.tables.objective_values`), and says which objective, and which way is better:

>>> objective_label("latency_ms:min")
'latency_ms (lower is better)'
"""

from __future__ import annotations

import html
import json
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from nas.core.objectives import Objective

SCALE = "Viridis"
HEIGHT = 420


def literal(value: Any) -> str:
    """A run's text (an architecture, a worker's name, an error, a decision's or a metric's name) as it goes into a
    plotly label, tick, hover text, legend name, title or annotation: plotly reads those as HTML-like markup (``<a
    href>`` a live link, ``<b>``, ``<br>``, ``<span style>``), so ``&``, ``<`` and ``>`` are escaped and plotly shows
    the text as it is. Every figure of the report passes the run's text through here.

    >>> literal('<a href="https://evil.example">x</a> & <br>')
    '&lt;a href="https://evil.example"&gt;x&lt;/a&gt; &amp; &lt;br&gt;'
    """
    return html.escape(str(value), quote=False)


def literals(values: Any) -> list[str]:
    """:func:`literal` of each value."""
    return [literal(v) for v in values]


def _layout(fig: go.Figure, title: str, x: str, y: str, **kw: Any) -> go.Figure:
    """``title`` and the axes' titles (which name the run's metrics) shown as they are (:func:`literal`)."""
    title, x, y = literal(title), literal(x), literal(y)
    fig.update_layout(title=title, xaxis_title=x, yaxis_title=y, height=kw.pop("height", HEIGHT),
                      template="plotly_white", margin={"l": 60, "r": 20, "t": 50, "b": 50}, **kw)
    return fig


def objective_label(objective: str | Objective) -> str:
    """An objective's name and direction, for an axis or a colour bar."""
    o = Objective.parse(objective)
    return f"{o.metric} ({'higher' if o.mode == 'max' else 'lower'} is better)"


def _best_line(values: pd.Series, objective: Objective) -> pd.Series:
    return values.cummax() if objective.mode == "max" else values.cummin()


#: the most trials a figure draws one mark (a point, a line, a bar) for; beyond, a seeded sample, and the title says so
MAX_POINTS = 5_000


def drawn(d: pd.DataFrame, keep: Any = (), most: int | None = None) -> tuple[pd.DataFrame, str]:
    """``d``, or (more than ``most`` rows) a seeded sample of ``most`` of its rows that holds the rows ``keep`` labels
    (the best, the improvements: what the figure is read for; where they are more than ``most``, the first ``most``
    of them in ``keep``'s order), in ``d``'s order; and what the title adds.

    >>> d = pd.DataFrame({"v": range(10)})
    >>> part, note = drawn(d, keep=[9], most=4)
    >>> len(part), 9 in part.index, note
    (4, True, ' (4 of 10 trials drawn: a seeded sample)')
    >>> drawn(d)[0] is d, drawn(d)[1]
    (True, '')
    """
    most = MAX_POINTS if most is None else most
    if len(d) <= most:
        return d, ""
    kept = d.index.isin(list(keep)[:most])  # (more to keep than to draw, as when nearly every trial improved)
    rng = np.random.default_rng(0)
    chosen = kept.copy()
    chosen[rng.choice(np.flatnonzero(~kept), most - int(kept.sum()), replace=False)] = True
    return d[chosen], f" ({int(chosen.sum()):,} of {len(d):,} trials drawn: a seeded sample)"


def timed(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with ``t_start``/``t_end``: seconds since the first trial started."""
    t0 = float(df.start_time.min()) if len(df) and df.start_time.notna().any() else 0.0
    return df.assign(t_start=df.start_time - t0, t_end=df.end_time - t0)


def best_so_far(runs: dict[str, tuple[pd.DataFrame, pd.Series]], objective: str | Objective) -> go.Figure | None:
    """Every trial's value of ``objective`` when it finished, and the best so far as a step line (one per run:
    its results frame and each row's value of the objective)."""
    o = Objective.parse(objective)
    fig = go.Figure()
    notes = []
    for name, (df, values) in runs.items():
        d = timed(df).assign(value=values).sort_values("t_end")
        done = d[(d.state == "COMPLETE") & d.value.notna()]
        if done.empty:
            continue
        label = f"{literal(name)}: " if len(runs) > 1 else ""
        metric = literal(o.metric)
        best = _best_line(done.value, o)
        steps = best.ne(best.shift()).to_numpy(copy=True)  # (the improvements: the line needs only them, and its end)
        steps[-1] = True
        improved = done.index[steps][::-1]  # (the best first)
        shown, note = drawn(done, keep=improved)
        most = f"the latest {MAX_POINTS:,} of {len(improved):,} improvements" if len(improved) > MAX_POINTS else \
            "every improvement"
        notes += [f"{label}{note.strip(' ()')}, {most} among them"] if note else []
        fig.add_scatter(x=shown.t_end, y=shown.value, mode="markers", name=f"{label}trials", opacity=0.5,
                        marker={"size": 6}, customdata=np.stack([shown.trial_id, literals(shown.arch)], axis=1),
                        hovertemplate=f"trial %{{customdata[0]}}<br>{metric} %{{y:.4g}}<br>%{{x:.1f}} s<br>"
                                      "%{customdata[1]}<extra></extra>")
        fig.add_scatter(x=done.t_end[steps], y=best[steps], mode="lines", line={"shape": "hv", "width": 3},
                        name=f"{label}best so far")
        failed, note = drawn(d[d.state == "FAILED"])
        notes += [f"{label}FAILED: {note.strip(' ()')}"] if note else []
        if len(failed):
            worst = float(done.value.min() if o.mode == "max" else done.value.max())
            fig.add_scatter(x=failed.t_end, y=[worst] * len(failed), mode="markers",
                            marker={"symbol": "x", "color": "crimson", "size": 8},
                            name=f"{label}FAILED (at the worst {metric})", text=literals(failed.error),
                            hovertemplate="trial failed: %{text}<extra></extra>")
    if not fig.data:
        return None
    more = f" ({'; '.join(notes)})" if notes else ""
    return _layout(fig, f"Best {o.metric} so far and every trial{more}", "seconds since the first trial started",
                   objective_label(o))


def curve_metric(df: pd.DataFrame) -> str | None:
    """The per-epoch metric to draw: ``val_acc`` or ``score`` where recorded, else the first numeric one."""
    keys: list[str] = []
    for hist in df.get("history", pd.Series(dtype=object)):
        for rec in hist or []:
            keys += [k for k, v in rec.items() if k != "epoch" and isinstance(v, (int, float)) and k not in keys]
    for k in ("val_acc", "score", "accuracy", "val_loss"):
        if k in keys:
            return k
    return keys[0] if keys else None


#: shades of the colour scale the learning curves are drawn in (one trace each)
CURVE_COLOURS = 12


def learning_curves(df: pd.DataFrame, final: pd.Series, objective: str | Objective) -> go.Figure | None:
    """One line per trial: its per-epoch metric (from the journaled ``history``), coloured by its ``final`` value
    of ``objective`` (brighter is better). The lines of one of :data:`CURVE_COLOURS` shades (FAILED: red) share one
    trace, broken between trials: a trace per trial cost plotly 25 s and the page a trace's markup per trial."""
    metric = curve_metric(df)
    if metric is None:
        return None
    o = Objective.parse(objective)
    better = final if o.mode == "max" else -final  # (the colour scale runs dark to bright, worse to better)
    lo, hi = (float(better.min()), float(better.max())) if better.notna().any() else (0.0, 1.0)
    lines: dict[str, tuple[list[Any], list[Any], list[Any]]] = {}  # colour -> x, y, trial ids (None between trials)
    for tid, state, history, value in zip(df.trial_id, df.state, df.history, better, strict=True):
        hist = [r for r in (history or []) if metric in r]
        if not hist:
            continue
        frac = 0.5 if hi == lo or pd.isna(value) else (float(value) - lo) / (hi - lo)
        frac = frac if frac == frac else 0.5  # (NaN: values spread wider than a float, 1e308 and -1e308)
        color = _viridis(round(frac * (CURVE_COLOURS - 1)) / (CURVE_COLOURS - 1)) if state == "COMPLETE" else "crimson"
        xs, ys, ids = lines.setdefault(color, ([], [], []))
        xs += [*(r.get("epoch", i + 1) for i, r in enumerate(hist)), None]
        ys += [*(r[metric] for r in hist), None]
        ids += [int(tid)] * len(hist) + [None]
    if not lines:
        return None
    fig = go.Figure()
    for color, (xs, ys, ids) in lines.items():
        fig.add_scatter(x=xs, y=ys, customdata=ids, mode="lines+markers", line={"color": color, "width": 1.5},
                        marker={"size": 4}, showlegend=False, opacity=0.8, connectgaps=False,
                        hovertemplate=f"trial %{{customdata}}<br>epoch %{{x}}<br>{literal(metric)} %{{y:.4f}}"
                                      "<extra></extra>")
    return _layout(fig, f"Learning curves ({metric} per epoch; colour: final {o.metric}, brighter is better; red: "
                   "FAILED)", "epoch", metric)


def _viridis(frac: float) -> str:
    from plotly.colors import sample_colorscale

    frac = frac if frac == frac else 0.5  # (NaN: values spread wider than a float, 1e308 and -1e308: the middle)
    return str(sample_colorscale(SCALE, [min(max(frac, 0.0), 1.0)])[0])


def genealogy(df: pd.DataFrame, values: pd.Series, objective: str | Objective) -> go.Figure | None:
    """Who descends from whom: each trial at (trial id, its value of ``objective``, from ``values``), a line from
    its parent, coloured by that value."""
    o = Objective.parse(objective)
    done = df.assign(value=values)
    done = done[(done.state == "COMPLETE") & done.value.notna()].set_index("trial_id")
    if done.empty:
        return None
    value = done.value.to_dict()  # (a lookup per child: iterrows and .loc per row took 23 of 98 s at 100k trials)
    n_children = int(done.parent.notna().sum())
    top = min(100, MAX_POINTS // 10)
    done, note = drawn(done, keep=done.value.sort_values(ascending=o.mode == "min").index[:top])  # (the best always)
    pairs = [(int(parent), tid) for tid, parent in zip(done.index, done.parent, strict=True)
             if not pd.isna(parent) and int(parent) in value]
    xs = np.full(3 * len(pairs), np.nan)  # parent, child, gap: one line per pair in one trace
    ys = np.full(3 * len(pairs), np.nan)
    if pairs:
        xs[0::3], xs[1::3] = zip(*pairs, strict=True)
        ys[0::3] = [value[parent] for parent, _ in pairs]
        ys[1::3] = [value[child] for _, child in pairs]
    fig = go.Figure()
    fig.add_scatter(x=xs, y=ys, mode="lines", line={"color": "rgba(120,120,120,0.45)", "width": 1},
                    hoverinfo="skip", name="parent -> child")
    fig.add_scatter(x=done.index, y=done.value, mode="markers", name="trials",
                    marker={"color": done.value, "colorscale": SCALE, "size": 9, "showscale": True,
                            "reversescale": o.mode == "min", "colorbar": {"title": literal(o.metric)},
                            "line": {"width": 0.5, "color": "white"}},
                    customdata=np.stack([done.parent.astype("string").fillna("-"), literals(done.arch)], axis=1),
                    hovertemplate=f"trial %{{x}}<br>{literal(o.metric)} %{{y:.4g}}<br>parent %{{customdata[0]}}<br>"
                                  "%{customdata[1]}<extra></extra>")
    return _layout(fig, f"Genealogy by {o.metric}: {n_children:,} trials with a parent (lines join parent and child)"
                   f"{note.replace(' trials drawn', f' trials drawn, the best {top} among them')}",
                   "trial id (order proposed)", objective_label(o), showlegend=False)


def decisions_frame(df: pd.DataFrame, parse: Any) -> pd.DataFrame:
    """One column per decision, from the ``arch`` column (``parse`` a registered space's parser, or None:
    canonical JSON). A choice that is a list or a table is its canonical JSON text: a value a column can count,
    sort and store (a space's options may be any JSON data)."""
    def one(text: str) -> dict[str, Any]:
        try:
            arch = dict(parse(text)) if parse is not None else dict(json.loads(text))
        except Exception:
            return {}
        return {k: json.dumps(v, sort_keys=True) if isinstance(v, list | tuple | dict) else v
                for k, v in arch.items()}

    return pd.DataFrame([one(a) for a in df.arch], index=df.index)


def parallel_coordinates(df: pd.DataFrame, decisions: pd.DataFrame, values: pd.DataFrame,
                         objectives: list[str]) -> go.Figure | None:
    """Each COMPLETE trial as a line through its choice for every decision, ending at each objective (``metric:mode``;
    ``values`` a column per objective metric, in its own units), coloured by the first (brighter is better)."""
    done = df.state == "COMPLETE"
    if not done.any() or decisions.empty:
        return None
    first = Objective.parse(objectives[0])
    top = min(100, MAX_POINTS // 10)
    shown, note = drawn(df[done], keep=values.loc[done, first.metric].sort_values(ascending=first.mode == "min")
                        .index[:top])
    done = df.index.isin(shown.index)
    dims = []
    for col in decisions.columns:
        chosen = decisions.loc[done, col]
        options = sorted(chosen.dropna().unique(), key=lambda v: (str(type(v)), v))
        codes = {v: i for i, v in enumerate(options)}
        dims.append({"label": literal(col), "values": [codes.get(v, -1) for v in chosen],
                     "tickvals": list(range(len(options))), "ticktext": literals(options)})
    objs = [Objective.parse(o) for o in objectives]
    for o in objs:
        dims.append({"label": literal(f"{o.metric} ({o.mode})"), "values": values.loc[done, o.metric]})
    fig = go.Figure(go.Parcoords(line={"color": values.loc[done, first.metric], "colorscale": SCALE, "showscale": True,
                                       "reversescale": first.mode == "min",
                                       "colorbar": {"title": literal(first.metric)}},
                                 dimensions=dims))
    against = ", ".join(objective_label(o) for o in objs)
    note = note.replace(" trials drawn", f" trials drawn, the best {top} among them")
    fig = _layout(fig, f"Decisions against {against} (drag along an axis to filter){note}", "", "", height=480)
    return fig.update_layout(margin={"l": 90, "r": 90, "t": 110, "b": 40})


def worker_timeline(df: pd.DataFrame) -> go.Figure | None:
    """Which worker ran which trial when: one bar per trial, from start to end, on its worker's row; a long run's
    first :data:`MAX_POINTS` trials (a sample of bars would show idle workers that were not)."""
    d = timed(df).dropna(subset=["t_start", "t_end"])
    if d.empty:
        return None
    title = "Worker timeline (each bar a trial)"
    if len(d) > MAX_POINTS:
        n = len(d)
        d = d.nsmallest(MAX_POINTS, "t_start")
        title = (f"Worker timeline (each bar a trial): the first {MAX_POINTS:,} of {n:,} trials, to "
                 f"{float(d.t_end.max()):,.0f} s")
    fig = go.Figure()
    for state, color in (("COMPLETE", "#4c78a8"), ("FAILED", "crimson")):
        part = d[d.state == state]
        if part.empty:
            continue
        label = literals(part.worker.fillna("?").astype(str) + " @ " + part.node.fillna("?").astype(str))
        fig.add_bar(y=label, x=part.t_end - part.t_start, base=part.t_start, orientation="h", name=state,
                    marker={"color": color, "line": {"color": "white", "width": 1}}, text=part.trial_id,
                    textposition="inside", customdata=np.stack([part.trial_id, literals(part.arch)], axis=1),
                    hovertemplate="trial %{customdata[0]}<br>%{base:.1f} s to %{x:.1f} s long<br>"
                                  "%{customdata[1]}<extra></extra>")
    rows = d.worker.nunique()
    return _layout(fig, title, "seconds since the first trial started", "worker",
                   barmode="overlay", height=max(200, 60 + 40 * rows))


def population_age(df: pd.DataFrame, population: int | None) -> go.Figure | None:
    """Ages over time: each selected parent's age when its child was proposed (trials proposed since the
    parent), and, given the population size P, the mean age in seconds of the population (the last P
    COMPLETE results, as regularized evolution keeps them) at each finish."""
    d = timed(df).sort_values("t_end")
    fig = go.Figure()
    kids, note = drawn(d[d.parent.notna()])
    if len(kids):
        fig.add_scatter(x=kids.t_start, y=kids.trial_id - kids.parent.astype(int), mode="markers",
                        name=f"parent's age when chosen (trials){note}", marker={"size": 6})
    done = d[d.state == "COMPLETE"]
    if population and len(done):
        ends = done.t_end.to_numpy()
        sums = np.concatenate([[0.0], np.cumsum(ends)])
        window = min(population, len(ends))  # (a population of 2**63 from run.json: no wider than the run)
        first = np.maximum(np.arange(1, len(ends) + 1) - window, 0)  # (each finish's window: the last P, or fewer)
        means = (sums[1:] - sums[first]) / (np.arange(1, len(ends) + 1) - first)
        ages = ends - means  # (the mean of end_i - end_j over the window: end_i less the window's mean)
        every = max(1, -(-len(ends) // MAX_POINTS))  # (a line of at most MAX_POINTS points)
        fig.add_scatter(x=ends[::every], y=ages[::every], mode="lines",
                        name=f"mean age of the population of {population} (s)", yaxis="y2", line={"width": 2})
        fig.update_layout(yaxis2={"title": "population mean age (s)", "overlaying": "y", "side": "right"})
    if not fig.data:
        return None
    return _layout(fig, "Population age over time", "seconds since the first trial started",
                   "parent age (trials)", legend={"orientation": "h", "y": -0.25})
