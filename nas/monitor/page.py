"""``nas report RUN_DIR [RUN_DIR ...]``: one self-contained HTML page (plotly's JavaScript embedded once,
works offline) about a run, or several runs compared.

Everything comes from :func:`nas.run.reader.load_run` (the config and the results frame); no user code is
imported (architectures are parsed and drawn only for registered spaces). Sections: status; best so far
and every trial against time; learning curves; genealogy; decisions against the objectives; decision
importance (the views of trials' results once per objective, each named, in its own units and
direction); the multi-objective front (:func:`objective_front_section`, a hook: empty while a run has one
objective); population age; worker timeline; the best architectures; failed trials; trial detail
(sortable, filterable); the run configuration.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from nas.core.objectives import Objective
from nas.monitor import archdraw, figures
from nas.monitor.importance import importance_panel
from nas.monitor.tables import objective_values
from nas.monitor.usage import session_usage
from nas.run.config import RunConfig

STYLE = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:1.5em auto;padding:0 1em;color:#222}
h1{font-size:1.6em}h2{margin-top:1.8em;border-bottom:1px solid #ddd;padding-bottom:.2em}
pre{background:#f6f6f6;padding:.8em;overflow-x:auto;font-size:12px}.note{color:#666;font-style:italic}
.scroll{max-height:520px;overflow:auto;border:1px solid #ddd}
table{border-collapse:collapse;font-size:12px;width:100%}td,th{border-bottom:1px solid #eee;padding:3px 6px;
text-align:left;vertical-align:top}th{background:#fafafa;position:sticky;top:0;cursor:pointer;white-space:nowrap}
td.arch{font-family:monospace;word-break:break-all}.grid{display:grid;grid-template-columns:repeat(2,1fr);gap:8px}
input.filter{width:100%;padding:4px;margin:4px 0;box-sizing:border-box}#js-errors{color:crimson}"""

# Collects JavaScript errors where a test (and a reader) can see them; sorts and filters tables. Hand-written:
# a few lines, and the page must work offline with no other library than plotly.
SCRIPT = """window.jsErrors=[];window.addEventListener('error',function(e){window.jsErrors.push(String(e.message));
var el=document.getElementById('js-errors');if(el){el.textContent='JavaScript errors: '+window.jsErrors.join('; ');}});
function sortTable(th){var t=th.closest('table'),i=Array.prototype.indexOf.call(th.parentNode.children,th),
asc=th.dataset.asc!=='1';th.dataset.asc=asc?'1':'0';var rows=Array.from(t.tBodies[0].rows);
rows.sort(function(a,b){var x=a.cells[i].textContent,y=b.cells[i].textContent,nx=parseFloat(x),ny=parseFloat(y);
var c=(!isNaN(nx)&&!isNaN(ny))?nx-ny:x.localeCompare(y);return asc?c:-c;});
rows.forEach(function(r){t.tBodies[0].appendChild(r);});}
function filterTable(input,id){var q=input.value.toLowerCase();Array.from(document.getElementById(id).tBodies[0].rows)
.forEach(function(r){r.style.display=r.textContent.toLowerCase().indexOf(q)>=0?'':'none';});}"""


def objective_front_section(cfg: RunConfig, df: pd.DataFrame, key: str = "run") -> str:
    """The Pareto front (every trial, the front highlighted) and the hypervolume against time, for a run
    with several objectives (run.json ``objectives``); "" (no section) while the run has one."""
    from nas.core.objectives import Objectives
    from nas.monitor.front_figures import front_scatter, hypervolume_figure

    objectives = cfg.search.objectives
    if len(objectives) < 2:
        return ""
    obj = Objectives(objectives)
    return (f"<h3>Pareto front and hypervolume</h3><p>Objectives: {html.escape(', '.join(obj.to_list()))}.</p>"
            + _fig(front_scatter(df, obj), f"{key}-front", "no trial completed with every objective")
            + _fig(hypervolume_figure(df, obj), f"{key}-hypervolume", "no hypervolume yet"))


def _fig(fig: go.Figure | None, div_id: str, missing: str) -> str:
    if fig is None:
        return f"<p class='note'>{html.escape(missing)}</p>"
    return str(fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id,
                           config={"displaylogo": False, "responsive": True}))


def _table(df: pd.DataFrame, table_id: str, arch_cols: Sequence[str] = ("arch",)) -> str:
    head = "".join(f"<th onclick='sortTable(this)' title='sort'>{html.escape(str(c))}</th>" for c in df.columns)
    body = []
    for row in df.itertuples(index=False):
        cells = []
        for col, v in zip(df.columns, row):
            text = "" if v is None or (isinstance(v, float) and pd.isna(v)) else str(v)
            cls = " class='arch'" if col in arch_cols else ""
            cells.append(f"<td{cls}>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f"<input class='filter' placeholder='filter rows...' oninput=\"filterTable(this,'{table_id}')\">"
            f"<div class='scroll'><table id='{table_id}'><thead><tr>{head}</tr></thead><tbody>"
            + "\n".join(body) + "</tbody></table></div>")


#: rows a table of trials shows at most (a 100,000-trial run's table was 31 MB of the page, a DOM no browser sorts)
TABLE_ROWS = 2_000


def _capped(df: pd.DataFrame, table_id: str, which: str) -> str:
    """:func:`_table` of the first :data:`TABLE_ROWS` rows, saying where the rest are."""
    if len(df) <= TABLE_ROWS:
        return _table(df, table_id)
    return (f"<p class='note'>{which} {TABLE_ROWS:,} of {len(df):,} (every trial: nas results RUN --csv FILE)</p>"
            + _table(df.head(TABLE_ROWS), table_id))


def _num(v: Any, fmt: str) -> str:
    """A number formatted; "" for a missing one and for anything that is no number (a metric the run reported as
    text, a table or a list: the report plots and formats metrics as numbers)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        return ""
    return format(v, fmt)


def trial_table(df: pd.DataFrame, objectives: Sequence[str] = ("val_acc:max",)) -> pd.DataFrame:
    """Every trial with each objective in its own units and its metrics (params, FLOPs, latency where measured),
    best first (by the first objective)."""
    d = figures.timed(df).sort_values("score", ascending=False, na_position="last", kind="stable")
    values = objective_values(d, objectives)
    metrics = pd.DataFrame([m if isinstance(m, dict) else {} for m in d.metrics], index=d.index)
    extra = {k: metrics[k] for k in ("params", "flops", "latency_ms", "val_loss", "train_seconds")
             if k in metrics and k not in values}
    return pd.DataFrame({
        "trial": d.trial_id, "state": d.state, **{m: values[m].map(lambda v: _num(v, ".4g")) for m in values},
        **{k: v.map(lambda x: _num(x, ",.0f") if isinstance(x, (int, float)) and abs(x) >= 100 else _num(x, ".4g"))
           for k, v in extra.items()},
        "epochs": d.epochs, "start (s)": d.t_start.map(lambda v: _num(v, ".1f")),
        "duration (s)": d.duration.map(lambda v: _num(v, ".2f")), "worker": d.worker,
        "parent": d.parent.astype("string").fillna(""), "strategy": d.strategy, "arch": d.arch,
        "error": d.error,
    })


def _usage(run_dir: str | os.PathLike[str], cfg: RunConfig, df: pd.DataFrame) -> Any:
    """The run's wall time and utilization as ``nas status`` gives them (its workers from status.json)."""
    from nas.monitor.status import read_live

    live = read_live(run_dir) or {}
    return session_usage(df, live, live.get("workers") or cfg.execution.workers)


def run_section(name: str, cfg: RunConfig, df: pd.DataFrame, top: int, key: str, usage: Any) -> str:
    """Every section about one run (``key`` makes its element ids unique on a page of several runs)."""
    parse = _parser(cfg)
    decisions = figures.decisions_frame(df, parse)
    pop = cfg.search.strategy_options.get("population")
    if isinstance(pop, bool) or not isinstance(pop, int) or pop < 1:  # (run.json's options are the strategy's to check)
        pop = None
    counts = df.state.value_counts().to_dict()
    from nas.monitor import rungs
    done = df[df.state == "COMPLETE"].sort_values("score", ascending=False, kind="stable")  # (ties: as nas best)
    objectives = list(cfg.search.objectives or ["val_acc:max"])
    per = [Objective.parse(o) for o in objectives]
    multi = len(per) > 1
    fidelity = ""
    if rungs.has_rungs(df) and len(done):  # the best among the trials that trained the most epochs
        top_epochs = int(done.epochs.max())
        done, fidelity = done[done.epochs == top_epochs], f" at {top_epochs} epochs"
    best = "; ".join(_best_of(done, o, fidelity) for o in per) if len(done) else "no trial completed"
    util = f", worker utilization {usage.utilization:.2f}" if usage.utilization is not None else ""
    early = int(df.outcome.isin(rungs.EARLY).sum()) if "outcome" in df else 0
    stopped = f", {early} stopped early by the {cfg.search.scheduler} scheduler" if early else ""
    parts = [f"<h2 id='{key}'>{html.escape(name)}</h2><p>{html.escape(cfg.search.space)} / "
             f"{html.escape(cfg.search.strategy)}: {len(df)} trials ({counts.get('COMPLETE', 0)} COMPLETE, "
             f"{counts.get('FAILED', 0)} FAILED{html.escape(stopped)}) over {usage.wall:.1f} s on {usage.workers} "
             f"worker{'s' if usage.workers != 1 else ''}{util}; objectives "
             f"{html.escape(', '.join(cfg.search.objectives))}; {html.escape(best)}.</p>"]
    values = objective_values(df, objectives)  # each objective in its own units
    if rungs.has_rungs(df):  # a scheduler run: scores after different epochs are not comparable
        t_end = figures.timed(df).t_end
        firsts = [(f"Best so far at the highest fidelity{f' ({o.metric})' if multi else ''}, and every trial",
                   rungs.best_at_full_fidelity(df, t_end, values[o.metric], str(o)), "no trial completed") for o in per]
        table = rungs.rung_table(df)
        parts.append("<h3>Trials per rung</h3>" + _fig(rungs.rung_figure(df), f"{key}-rungs", "no rungs")
                     + _table(table.astype(str), f"{key}-rung-table", ()))
    else:
        firsts = [(f"Best {o.metric} so far and every trial",
                   figures.best_so_far({name: (df, values[o.metric])}, str(o)), "no trial completed") for o in per]
    sections: list[tuple[Any, ...]] = [  # one panel per objective where a view draws trials' results
        *firsts,
        ("Learning curves", figures.learning_curves(df, values[per[0].metric], objectives[0]),
         "no per-epoch history recorded"),
        *[(f"Genealogy{f' by {o.metric}' if multi else ''}", figures.genealogy(df, values[o.metric], str(o)),
           "no trial completed") for o in per],
        (f"Decisions against {', '.join(o.metric for o in per)}",
         figures.parallel_coordinates(df, decisions, values, objectives),
         "no trial completed" if not (df.state == "COMPLETE").any() else
         "no decisions to show (architectures not parsed)"),
        *[(f"Decision importance{f' for {o.metric}' if multi else ''}",
           *_importance(df.assign(score=values[o.metric]), decisions, str(o))) for o in per],
        ("Population age", figures.population_age(df, pop), "no parents and no population recorded"),
        ("Worker timeline", figures.worker_timeline(df), "no start and end times recorded"),
    ]
    for i, (title, fig, missing, *note) in enumerate(sections):  # (a note: shown under the figure)
        parts.append(f"<h3>{html.escape(title)}</h3>" + _fig(fig, f"{key}-plot{i}", missing)
                     + "".join(f"<p class='note'>{html.escape(n)}</p>" for n in note if n))
    parts.append(objective_front_section(cfg, df, key))
    parts.append(f"<h3>Best architectures (top {min(top, len(done))}{f' by {per[0].metric}' if multi else ''})</h3>"
                 + best_architectures(cfg, df, done, top, key))
    failed = df[df.state == "FAILED"]
    parts.append(f"<h3>Failed trials ({len(failed)})</h3>" + (
        _capped(failed[["trial_id", "arch", "worker", "error"]], f"{key}-failed", "the first") if len(failed)
        else "<p class='note'>none</p>"))
    parts.append("<h3>Trial detail</h3>" + _capped(trial_table(df, objectives), f"{key}-trials", "the best"))
    parts.append("<h3>Run configuration</h3><pre>" + html.escape(json.dumps(cfg.to_json(), indent=2, default=str))
                 + "</pre>")
    return "\n".join(parts)


def _importance(df: pd.DataFrame, decisions: pd.DataFrame, objective: str) -> tuple[Any, str, str]:
    """The importance panel's (figure, text instead of it, note under it)."""
    fig, note = importance_panel(df, decisions, objective)
    return (fig, note, "") if fig is None else (fig, "", note)


def _best_of(done: pd.DataFrame, o: Objective, fidelity: str) -> str:
    """``best val_acc 0.97 (trial 12)``: the best of the COMPLETE trials ``done`` by one objective, in its units."""
    v = objective_values(done, [str(o)]).iloc[:, 0].dropna()
    if v.empty:
        return f"no {o.metric} recorded"
    at = v.idxmax() if o.mode == "max" else v.idxmin()
    return f"best {o.metric}{fidelity} {v[at]:.4g} (trial {done.trial_id[at]})"


def best_architectures(cfg: RunConfig, df: pd.DataFrame, done: pd.DataFrame, top: int, key: str) -> str:
    parse = _parser(cfg)
    drawings = []
    drawer = archdraw.Drawer(cfg)
    values = objective_values(done.head(top), cfg.search.objectives)  # each objective in its own units
    for rank, (row, (_, vals)) in enumerate(zip(done.head(top).itertuples(), values.iterrows()), 1):
        named = ", ".join(f"{m} {_num(v, '.4g') or '-'}" for m, v in vals.items())
        fig = drawer.figure(row.arch, f"#{rank}: trial {row.trial_id}, {named}")
        if fig is not None:
            drawings.append(_fig(fig, f"{key}-arch{rank}", ""))
    if drawings:
        return "<div class='grid'>" + "\n".join(drawings[:4]) + "</div>" + (
            f"<p class='note'>{len(drawings) - 4} more in the trial detail below.</p>" if len(drawings) > 4 else "")
    table = pd.concat([done.head(top)[["trial_id"]].reset_index(drop=True), values.reset_index(drop=True),
                       figures.decisions_frame(done.head(top), parse).reset_index(drop=True)], axis=1)
    return _table(table.astype(str), f"{key}-best")


def _parser(cfg: RunConfig) -> Any:
    """The registered space's ``parse`` (no user code: a ``module:attr`` space is never imported)."""
    from nas.core.spec import space_from_spec

    try:
        return space_from_spec(cfg.search.space_spec(), allow_import=False).parse
    except Exception:  # (user code, or arguments of another version)
        return None


def comparison(runs: dict[str, tuple[RunConfig, pd.DataFrame]], usages: dict[str, Any]) -> str:
    first = str((next(iter(runs.values()))[0].search.objectives or ["val_acc:max"])[0])  # (the first run's)
    fig = figures.best_so_far({name: (df, objective_values(df, [first]).iloc[:, 0]) for name, (_, df) in runs.items()},
                              first)
    rows = []
    for name, (cfg, df) in runs.items():
        usage = usages[name]
        done = df[df.state == "COMPLETE"]
        rows.append({"run": name, "space": cfg.search.space, "strategy": cfg.search.strategy, "trials": len(df),
                     "failed": int((df.state == "FAILED").sum()),
                     "best": "; ".join(_best_of(done, Objective.parse(o), "").removeprefix("best ")
                                       for o in cfg.search.objectives or ["val_acc:max"]) if len(done) else "-",
                     "wall (s)": f"{usage.wall:.1f}",
                     "utilization": "-" if usage.utilization is None else f"{usage.utilization:.2f}"})
    return ("<h2>Comparison</h2>" + _table(pd.DataFrame(rows), "compare", ()) + _fig(fig, "compare-plot", "no trial"))


class NothingToReport(ValueError):
    """A run with no finished trial yet: no report to draw (the live page says so instead)."""


def write_report(run_dirs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
                 out: str | os.PathLike[str] | None = None, top: int = 10) -> Path:
    """Write the page (default ``<first run>/report.html``) and return its path."""
    dirs = [run_dirs] if isinstance(run_dirs, (str, os.PathLike)) else list(run_dirs)
    page = report_html(dirs, top)
    path = Path(out) if out is not None else Path(dirs[0]) / "report.html"
    from nas.run.export import write_export  # (a run's own files refused; atomic: nothing left on failure)

    write_export(path, page.encode("utf-8"))
    return path


def report_html(dirs: Sequence[str | os.PathLike[str]], top: int = 10, *, plotlyjs: str | None = None,
                head: str = "", before: str = "") -> str:
    """The report page as text: plotly's JavaScript embedded, or loaded from the URL ``plotlyjs`` (the live
    page serves it itself); ``head`` goes into the page's head, ``before`` above the runs' sections."""
    from nas.run.reader import load_run

    runs: dict[str, tuple[RunConfig, pd.DataFrame]] = {}
    usages: dict[str, Any] = {}
    for d in dirs:
        cfg, df = load_run(d)  # (a read: it never imports code that run.json names)
        if df.empty:
            raise NothingToReport(f"run {str(d)!r} has no finished trial yet: nothing to report")
        name = Path(d).name or str(d)
        name = name if name not in runs else str(d)
        runs[name], usages[name] = (cfg, df), _usage(d, cfg, df)
    body = [comparison(runs, usages)] if len(runs) > 1 else []
    body += [run_section(name, cfg, df, top, f"run{i}", usages[name])
             for i, (name, (cfg, df)) in enumerate(runs.items())]
    title = "NAS report: " + ", ".join(runs)
    js = f"<script src='{html.escape(plotlyjs)}'></script>" if plotlyjs else f"<script>{get_plotlyjs()}</script>"
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"{head}<style>{STYLE}</style><script>{SCRIPT}</script>{js}</head><body>"
            f"<h1>{html.escape(title)}</h1><div id='js-errors'></div>{before}" + "\n".join(body) + "</body></html>")
