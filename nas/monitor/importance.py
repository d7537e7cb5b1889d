"""Per-decision importance of a finished run, by Optuna's importance evaluators fed the run's trials.

The COMPLETE trials become a study (``optuna.trial.create_trial`` + ``study.add_trials``): each decision
a categorical parameter over the options seen, the score the value (maximised); then
``optuna.importance.get_param_importances`` (its default evaluator) ranks the decisions.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go


def decision_importance(df: pd.DataFrame, decisions: pd.DataFrame, seed: int = 0) -> dict[str, float]:
    """Decision -> importance (they sum to 1); empty when fewer than 2 COMPLETE trials or no decision varies.

    >>> df = pd.DataFrame({"state": ["COMPLETE"] * 8, "score": [1, 1, 2, 2, 1, 1, 2, 2.0]})
    >>> dec = pd.DataFrame({"a": [0, 0, 1, 1, 0, 0, 1, 1], "b": [0, 1, 0, 1, 1, 0, 1, 0]})
    >>> imp = decision_importance(df, dec)
    >>> max(imp, key=imp.get)
    'a'
    """
    import optuna
    from optuna.distributions import CategoricalDistribution

    done = df.state == "COMPLETE"
    dec = decisions.loc[done]
    varying = [c for c in dec.columns if dec[c].nunique(dropna=True) > 1]
    if done.sum() < 2 or not varying:
        return {}
    dists = {c: CategoricalDistribution(sorted({_plain(v) for v in dec[c].dropna()}, key=str)) for c in varying}
    trials = []
    for i in dec.index:
        params = {c: _plain(dec.at[i, c]) for c in varying if not pd.isna(dec.at[i, c])}
        trials.append(optuna.trial.create_trial(params=params, distributions={c: dists[c] for c in params},
                                                value=float(df.at[i, "score"])))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=seed))
    study.add_trials(trials)
    try:
        evaluator = optuna.importance.FanovaImportanceEvaluator(seed=seed)
        return dict(optuna.importance.get_param_importances(study, evaluator=evaluator))
    except (ValueError, RuntimeError, ImportError):
        return {}


def _plain(v: Any) -> Any:
    """numpy scalars -> Python values (Optuna's categorical choices are None, bool, int, float or str)."""
    item = getattr(v, "item", None)
    return item() if callable(item) else v


def importance_figure(importance: dict[str, float], objective: str = "val_acc:max") -> go.Figure | None:
    """Bars of each decision's importance for ``objective`` (``metric:mode``: named in the title)."""
    if not importance:
        return None
    names = list(importance)[::-1]
    fig = go.Figure(go.Bar(x=[importance[n] for n in names], y=names, orientation="h",
                           marker={"color": "#4c78a8"}, hovertemplate="%{y}: %{x:.3f}<extra></extra>"))
    fig.update_layout(title=f"Decision importance for {objective.partition(':')[0]} (Optuna fANOVA evaluator over the "
                      "COMPLETE trials)",
                      xaxis_title="importance (sums to 1)", template="plotly_white",
                      height=max(220, 80 + 28 * len(names)), margin={"l": 120, "r": 20, "t": 50, "b": 50})
    return fig
