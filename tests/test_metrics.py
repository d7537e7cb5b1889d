"""Search metrics: recorded by the driver, read back off Ray's real Prometheus export endpoint."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import pytest
import ray

import nas
from nas.monitor.metrics import (
    EXPORTED_NAMES,
    METRICS,
    MetricsCallback,
    metrics_export_url,
    parse_prometheus,
    scrape,
)
from nas.monitor.status import monitoring_callbacks
from nas.run.journal import read_records
from nas.search_spaces.toy import ToySpace, toy_score
from nas.strategies.evolution import RegularizedEvolution
from nas.strategies.random import RandomSearch
from nas.train.settings import TrainSettings
from tests.helpers import wait_until

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this module

DASHBOARD = Path(__file__).resolve().parent.parent / "dashboards" / "nas.json"


def score_or_nan(arch):
    """The toy objective, except that architectures with d4 == 1 'diverge' (a NaN score: FAILED).
    With seed 0 the first random architecture has d4 == 1 and the next three d4 == 4, so the run has
    failures and completions whatever order Ray finishes its trials in."""
    return math.nan if arch["d4"] == 1 else toy_score(arch)


def reporting_train(ctx):
    """Three epochs: at the first, later trials look worse (so ASHA surely stops some at rung 1), then the
    toy objective (NaN for the 'diverging' architectures: FAILED)."""
    for epoch in (1, 2, 3):
        value = 1.0 / (1 + ctx.trial.trial_id) if epoch == 1 else score_or_nan(ctx.trial.arch)
        if ctx.report(epoch=epoch, val_acc=value):
            return


def test_population_size_is_part_of_the_strategy_contract():
    evo = RegularizedEvolution(ToySpace(), population=4, sample_size=2, seed=0)
    assert evo.population_size() == 0
    evo.population.extend([object()] * 3)
    assert evo.population_size() == 3
    assert RandomSearch(ToySpace(), seed=0).population_size() == 0


def test_parse_prometheus_reads_labels_and_values():
    text = ('# HELP ray_nas_best_score best\n# TYPE ray_nas_best_score gauge\n'
            'ray_nas_best_score{run="a \\"b\\"",strategy="evolution"} -4.0\n'
            'ray_other 1\nray_nas_trials_started_total{run="r"} 12.0\n')
    assert parse_prometheus(text, "ray_nas_") == [
        ("ray_nas_best_score", {"run": 'a "b"', "strategy": "evolution"}, -4.0),
        ("ray_nas_trials_started_total", {"run": "r"}, 12.0),
    ]


def test_exported_names_follow_rays_conventions():
    assert "ray_nas_trials_started_total" in EXPORTED_NAMES
    assert {"ray_nas_trial_duration_seconds_bucket", "ray_nas_trial_duration_seconds_count",
            "ray_nas_trial_duration_seconds_sum"} <= EXPORTED_NAMES
    assert all(re.fullmatch(r"nas_[a-z_]+", spec.name) for spec in METRICS)


def _values(samples, run, name, **labels):
    return [v for n, lab, v in samples
            if n == name and lab.get("run") == run and all(lab.get(k) == x for k, x in labels.items())]


@pytest.mark.ray
def test_a_ray_search_exports_its_metrics_and_status(ray_local, tmp_path):
    run = "metrics-run"
    # what nas.search attaches on Ray, given explicitly to keep a handle on its actor (and record at once)
    metrics = MetricsCallback(run, namespace=f"nas-{run}", interval=0.0)
    df = nas.search(ToySpace(), "evolution", budget=12, workers=2, seed=0, run_dir=tmp_path / run,
                    strategy_options={"population": 4, "sample_size": 2}, callbacks=[metrics],
                    train=reporting_train, scheduler="asha",
                    settings=TrainSettings(epochs=3, measure_costs=False, device="cpu"))
    failed = int((df.state == "FAILED").sum())
    stopped = int((df.outcome == "STOPPED").sum())
    reports = sum(r.kind == "report" for r in read_records(tmp_path / run / "trials.jsonl"))
    assert stopped > 0
    assert len(df) == 12 and 0 < failed < 12
    best = df[df.state == "COMPLETE"].score.max()

    # the driver's loop, as the named actor in the run's namespace holds it
    assert ray.get_actor("nas-search", namespace=f"nas-{run}")._actor_id == metrics.actor._actor_id
    status = ray.get(metrics.actor.status.remote())
    assert status["state"] == "finished" and status["finished"] == 12 and status["workers"] == 2
    assert status["best_score"] == best and status["failed"] == failed and status["running"] == 0

    # Ray's metrics agent exports on its own period (no event to hear): ask the endpoint until the final values show
    url = metrics_export_url()

    def final() -> list | None:
        samples = scrape(url)
        done = (_values(samples, run, "ray_nas_trials_finished_total") == [12.0]
                and _values(samples, run, "ray_nas_busy_workers") == [0.0]
                and sum(_values(samples, run, "ray_nas_strategy_seconds_count")) == 24.0)
        return samples if done else None

    samples = wait_until(final, f"the run's final metrics on the endpoint {url}", timeout=90, every=0.5)
    assert _values(samples, run, "ray_nas_trials_started_total", strategy="evolution") == [12.0]
    assert _values(samples, run, "ray_nas_trials_failed_total") == [float(failed)]
    assert sum(_values(samples, run, "ray_nas_reports_total")) == reports
    assert _values(samples, run, "ray_nas_trials_ended_early_total", reason="STOPPED") == [float(stopped)]
    assert _values(samples, run, "ray_nas_best_value", objective="val_acc:max") == [best]
    assert _values(samples, run, "ray_nas_workers") == [2.0]
    assert _values(samples, run, "ray_nas_budget") == [12.0]
    assert _values(samples, run, "ray_nas_population_size") == [4.0]
    assert sum(_values(samples, run, "ray_nas_trial_duration_seconds_count")) == 12.0
    assert _values(samples, run, "ray_nas_trial_duration_seconds_count", state="FAILED") == [float(failed)]
    asks = _values(samples, run, "ray_nas_strategy_seconds_count", op="ask")
    assert asks == [12.0] and _values(samples, run, "ray_nas_strategy_seconds_count", op="tell") == [12.0]
    strategy_time = sum(_values(samples, run, "ray_nas_strategy_time_seconds_total"))
    assert strategy_time == pytest.approx(df.attrs["summary"]["strategy_seconds"], rel=1e-6)

    # every series the Grafana dashboard queries is one the endpoint really carries (but the collapsed
    # multi-objective row's: a run with one objective exports no front)
    exprs = [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p.get("targets", [])]
    assert not {n for n, lab, _ in samples if lab.get("run") == run} & {"ray_nas_hypervolume", "ray_nas_front_size"}
    queried = {n for e in exprs for n in re.findall(r"\bray_nas_[a-z_]+", e)}
    seen = {n for n, lab, _ in samples if lab.get("run") == run}
    assert queried <= seen, f"queried but never exported: {queried - seen}"

    # the run directory's status file says it finished
    assert json.loads((tmp_path / run / "status.json").read_text())["state"] == "finished"



@pytest.mark.ray
def test_nas_search_attaches_monitoring_by_default_on_ray_only(ray_local, tmp_path):
    kinds = [type(cb) for cb in monitoring_callbacks(tmp_path, ray_namespace="nas-x")]
    assert kinds == [MetricsCallback]  # (status.json is the run directory owner's, on every executor)
    assert monitoring_callbacks(tmp_path) == []  # not on Ray
    given = [MetricsCallback("x", status_actor=False)]
    assert monitoring_callbacks(tmp_path, ray_namespace="nas-x", given=given) == []
