"""``nas report RUN_DIR``: one self-contained HTML page (plots embedded as PNG) about a run.

Plots: the best score so far against wall time; the score of every trial against the time it finished,
coloured by the strategy that proposed it; and the Pareto front of score against parameter count (the
trainer's ``metrics["params"]``; :class:`nas.trainer.TorchTrainer` records it). Then a table of the
top trials. Times are seconds since the run's first trial started.
"""

from __future__ import annotations

import base64
import html
import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from nas.api import load_run
from nas.status import format_status, run_status


def pareto_front(params: Sequence[float], scores: Sequence[float]) -> list[int]:
    """Indices of the points no other point beats on both fewer parameters and a higher score,
    ordered by parameter count.

    >>> pareto_front([10, 20, 30, 15], [0.5, 0.9, 0.8, 0.4])
    [0, 1]
    """
    order = sorted(range(len(params)), key=lambda i: (params[i], -scores[i]))
    front, best = [], float("-inf")
    for i in order:
        if scores[i] > best:
            front.append(i)
            best = scores[i]
    return front


def _png(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _params(df: pd.DataFrame) -> pd.Series:
    return df.metrics.map(lambda m: m.get("params") if isinstance(m, dict) else None)


def figures(df: pd.DataFrame, strategy: str) -> list[tuple[str, str]]:
    """(title, base64 PNG) of the three plots."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    t0 = float(df.start_time.min()) if len(df) else 0.0
    df = df.assign(t=df.end_time - t0, strategy=df.strategy.replace("", strategy).fillna(strategy))
    done = df[df.state == "COMPLETE"].sort_values("t")
    failed = df[df.state == "FAILED"]
    out = []

    fig, ax = plt.subplots(figsize=(7, 3.6))
    if len(done):
        best = done.score.cummax()
        ax.step(list(done.t) + [float(df.t.max())], list(best) + [float(best.iloc[-1])], where="post",
                color="tab:blue", lw=2, label="best so far")
        ax.scatter(done.t, done.score, s=10, color="tab:gray", alpha=0.4, label="trials")
        ax.legend(loc="best", fontsize=9)
    ax.set(xlabel="seconds since the first trial started", ylabel="score (higher is better)",
           title=f"Best score so far ({len(done)} completed trials)")
    ax.grid(alpha=0.3)
    out.append(("Best score so far against time", _png(fig)))

    fig, ax = plt.subplots(figsize=(7, 3.6))
    for name, group in done.groupby("strategy", sort=True):
        ax.scatter(group.t, group.score, s=18, alpha=0.8, label=str(name))
    if len(failed):
        y = float(done.score.min()) if len(done) else 0.0
        ax.scatter(failed.t, [y] * len(failed), marker="x", color="tab:red", s=24,
                   label=f"FAILED ({len(failed)}, drawn at the lowest score)")
    if len(done) or len(failed):
        ax.legend(loc="best", title="strategy", fontsize=9)
    ax.set(xlabel="seconds since the first trial started (trial finished)", ylabel="score",
           title="Score of every trial, by strategy")
    ax.grid(alpha=0.3)
    out.append(("Score of every trial against time, coloured by strategy", _png(fig)))

    fig, ax = plt.subplots(figsize=(7, 3.6))
    with_params = done.assign(params=_params(done)).dropna(subset=["params"])
    if len(with_params):
        p, s = with_params.params.astype(float).tolist(), with_params.score.tolist()
        front = pareto_front(p, s)
        ax.scatter(p, s, s=14, color="tab:gray", alpha=0.5, label="trials")
        ax.step([p[i] for i in front], [s[i] for i in front], where="post", color="tab:orange", lw=2,
                marker="o", label=f"Pareto front ({len(front)})")
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.legend(loc="best", fontsize=9)
        ax.set(xlabel="parameters (log scale)", ylabel="score", title="Score against parameter count")
    else:
        ax.text(0.5, 0.5, "no parameter counts recorded\n(the trainer puts them in metrics['params'])",
                ha="center", va="center", transform=ax.transAxes)
        ax.set(xticks=[], yticks=[], title="Score against parameter count")
    ax.grid(alpha=0.3)
    out.append(("Pareto front: score against parameter count", _png(fig)))
    return out


def top_table(df: pd.DataFrame, n: int = 10) -> pd.DataFrame:
    done = df[df.state == "COMPLETE"].sort_values("score", ascending=False).head(n)
    return pd.DataFrame({
        "trial": done.trial_id, "score": done.score.map(lambda v: f"{v:.4f}"),
        "params": _params(done).map(lambda v: "-" if v is None or pd.isna(v) else f"{int(v):,}"),
        "seconds": done.duration.map(lambda v: "-" if pd.isna(v) else f"{v:.1f}"),
        "strategy": done.strategy, "worker": done.worker, "parent": done.parent.map(
            lambda v: "-" if v is None or pd.isna(v) else str(int(v))),
        "architecture": done.arch,
    })


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}}
pre{{background:#f4f4f4;padding:1em;overflow-x:auto}} img{{max-width:100%}}
table{{border-collapse:collapse;font-size:13px}} td,th{{border:1px solid #ccc;padding:3px 6px;text-align:left}}
</style></head><body>
<h1>{title}</h1>
<pre>{status}</pre>
{figures}
<h2>Top trials</h2>
{table}
</body></html>
"""


def write_report(run_dir: str | os.PathLike[str], out: str | os.PathLike[str] | None = None,
                 top: int = 10) -> Path:
    """Write the report (default ``<run_dir>/report.html``) and return its path."""
    cfg, df = load_run(run_dir)
    if df.empty:
        raise ValueError(f"run {str(run_dir)!r} has no finished trial yet: nothing to report")
    path = Path(out) if out is not None else Path(run_dir) / "report.html"
    figs = "\n".join(f'<h2>{html.escape(title)}</h2>\n<img alt="{html.escape(title)}" '
                     f'src="data:image/png;base64,{png}">' for title, png in figures(df, cfg["strategy"]))
    table = top_table(df, top).to_html(index=False, escape=True, classes="top-trials", border=0)
    page = PAGE.format(title=html.escape(f"NAS run {Path(run_dir).name}"),
                       status=html.escape(format_status(run_status(run_dir))), figures=figs, table=table)
    try:
        path.write_text(page, encoding="utf-8")
    except OSError as e:
        raise ValueError(f"cannot write report {str(path)!r}: {e.strerror}") from None
    return path
