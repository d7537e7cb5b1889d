"""Per-decision importance of a finished run, by Optuna's importance evaluators fed the run's trials.

The COMPLETE trials become a study (``optuna.trial.create_trial`` + ``study.add_trials``): each decision
a categorical parameter over the options seen, the score the value (maximised); then
``optuna.importance.get_param_importances`` (its default evaluator) ranks the decisions.

fANOVA's cost grows with the decisions, the trials and its forest: a run of very wide architectures or of very many
trials is ranked on its first :data:`MAX_DECISIONS` varying decisions and a (seeded) sample of :data:`MAX_TRIALS` of
its COMPLETE trials, and the panel says so; the forest is :data:`FANOVA`'s, smaller than Optuna's default (64 trees
of depth 64), which took 31 s at 1,000 trials of 50 decisions against 1.2 s, for importances within a few
hundredths (``nas bench importance`` prints both side by side, with how well they agree). Scores whose spread is
not a finite number (1e308 and -1e308) are not ranked: the panel says why instead of ending the report.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

#: at most this many varying decisions are ranked (the first ones, in the architecture's order)
MAX_DECISIONS = 50
#: at most this many COMPLETE trials (a seeded sample) feed the ranking
MAX_TRIALS = 1000
#: the forest fANOVA fits (Optuna's ``FanovaImportanceEvaluator`` arguments; ``{}`` is Optuna's default)
FANOVA = {"n_trees": 16, "max_depth": 8}


class NotRanked(ValueError):
    """Why the decisions could not be ranked (one line, shown on the page)."""


def decision_importance(df: pd.DataFrame, decisions: pd.DataFrame, seed: int = 0,
                        notes: list[str] | None = None, forest: Mapping[str, int] = FANOVA) -> dict[str, float]:
    """Decision -> importance (they sum to 1); empty when fewer than 2 COMPLETE trials or no decision varies. A
    :class:`NotRanked` when the scores' spread is not finite or the evaluator cannot rank them; what was bounded
    (:data:`MAX_DECISIONS`, :data:`MAX_TRIALS`) is appended to ``notes``. ``forest``: fANOVA's (:data:`FANOVA`).

    >>> df = pd.DataFrame({"state": ["COMPLETE"] * 8, "score": [1, 1, 2, 2, 1, 1, 2, 2.0]})
    >>> dec = pd.DataFrame({"a": [0, 0, 1, 1, 0, 0, 1, 1], "b": [0, 1, 0, 1, 1, 0, 1, 0]})
    >>> imp = decision_importance(df, dec)
    >>> max(imp, key=imp.get)
    'a'
    >>> decision_importance(df.assign(score=[1e308, -1e308] * 4), dec)
    Traceback (most recent call last):
    ...
    nas.monitor.importance.NotRanked: the scores' spread is not a finite number (from -1e+308 to 1e+308): ...
    """
    import optuna
    from optuna.distributions import CategoricalDistribution

    notes = [] if notes is None else notes
    done = df.index[(df.state == "COMPLETE").to_numpy()]
    if len(done) > MAX_TRIALS:
        done = pd.Index(sorted(np.random.default_rng(seed).choice(done, MAX_TRIALS, replace=False)))
        notes.append(f"a sample of {MAX_TRIALS} of the {int((df.state == 'COMPLETE').sum())} COMPLETE trials")
    dec = decisions.loc[done]
    varying = [c for c in dec.columns if dec[c].nunique(dropna=True) > 1]
    if len(done) < 2 or not varying:
        return {}
    if len(varying) > MAX_DECISIONS:
        notes.append(f"the first {MAX_DECISIONS} of the {len(varying)} decisions that vary")
        varying = varying[:MAX_DECISIONS]
    scores = df.loc[done, "score"].astype(float).to_numpy()
    with np.errstate(over="ignore", invalid="ignore"):
        spread_ok = bool(np.isfinite(np.var(scores)))
    if not spread_ok:
        raise NotRanked(f"the scores' spread is not a finite number (from {np.nanmin(scores):.4g} to "
                        f"{np.nanmax(scores):.4g}): the decisions are not ranked")
    dists = {c: CategoricalDistribution(sorted({_plain(v) for v in dec[c].dropna()}, key=str)) for c in varying}
    trials = []
    for i, score in zip(done, scores):
        params = {c: _plain(dec.at[i, c]) for c in varying if not pd.isna(dec.at[i, c])}
        trials.append(optuna.trial.create_trial(params=params, distributions={c: dists[c] for c in params},
                                                value=float(score)))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=seed))
    study.add_trials(trials)
    try:
        evaluator = optuna.importance.FanovaImportanceEvaluator(seed=seed, **forest)
        return dict(optuna.importance.get_param_importances(study, evaluator=evaluator))
    except (ValueError, RuntimeError, ImportError):
        return {}
    except (ArithmeticError, AssertionError) as e:  # (fANOVA's own checks, on numbers it cannot take)
        raise NotRanked(f"Optuna's fANOVA could not rank these scores ({type(e).__name__}"
                        f"{': ' + str(e) if str(e) else ''})") from None


def importance_panel(df: pd.DataFrame, decisions: pd.DataFrame, objective: str) -> tuple[go.Figure | None, str]:
    """The importance figure of ``objective`` (or None) and the note shown with it (or instead of it)."""
    notes: list[str] = []
    try:
        fig = importance_figure(decision_importance(df, decisions, notes=notes), objective)
    except NotRanked as e:
        return None, str(e)
    if fig is None:
        return None, "too few COMPLETE trials, or no decision varies, to rank decisions"
    return fig, ("ranked on " + " and ".join(notes) + " (fANOVA's time grows with both)") if notes else ""


def _plain(v: Any) -> Any:
    """numpy scalars -> Python values (Optuna's categorical choices are None, bool, int, float or str)."""
    item = getattr(v, "item", None)
    return item() if callable(item) else v


def importance_figure(importance: dict[str, float], objective: str = "val_acc:max") -> go.Figure | None:
    """Bars of each decision's importance for ``objective`` (``metric:mode``: named in the title)."""
    if not importance:
        return None
    from nas.monitor.figures import literal, literals

    names = list(importance)[::-1]
    fig = go.Figure(go.Bar(x=[importance[n] for n in names], y=literals(names), orientation="h",
                           marker={"color": "#4c78a8"}, hovertemplate="%{y}: %{x:.3f}<extra></extra>"))
    fig.update_layout(title=f"Decision importance for {literal(objective.partition(':')[0])} (Optuna fANOVA evaluator "
                      "over the COMPLETE trials)",
                      xaxis_title="importance (sums to 1)", template="plotly_white",
                      height=max(220, 80 + 28 * len(names)), margin={"l": 120, "r": 20, "t": 50, "b": 50})
    return fig
