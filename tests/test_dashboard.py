"""The Grafana dashboard in dashboards/: valid JSON that queries only metrics the platform exports.

(tests/test_metrics.py also checks every series it queries against a real run's export endpoint.)
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nas.monitor.metrics import EXPORTED_NAMES, METRICS

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = json.loads((ROOT / "dashboards" / "nas.json").read_text())
ROWS = [p for p in DASHBOARD["panels"] if p["type"] == "row"]
PANELS = [p for p in DASHBOARD["panels"] if p["type"] != "row"] + [q for r in ROWS for q in r.get("panels", [])]
EXPRS = [t["expr"] for p in PANELS for t in p["targets"]]
VARIABLE_QUERIES = [v["query"]["query"] for v in DASHBOARD["templating"]["list"] if v["type"] == "query"]


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers followed by a selector, not label names or
    functions (every metric this dashboard reads is Ray's, ``ray_...``)."""
    return set(re.findall(r"\b(ray_[a-zA-Z0-9_]+)\s*[{\[)]", expr))


def test_every_queried_metric_is_exported_by_the_platform():
    queried = set().union(*map(metric_names, EXPRS + VARIABLE_QUERIES))
    assert queried, "the dashboard queries nothing"
    assert queried <= EXPORTED_NAMES, f"not exported by nas.monitor.metrics: {sorted(queried - EXPORTED_NAMES)}"


def test_every_exported_metric_is_plotted():
    queried = set().union(*map(metric_names, EXPRS))
    for spec in METRICS:
        assert set(spec.exported) & queried, f"no panel plots {spec.name}"


@pytest.mark.parametrize("expr", EXPRS)
def test_queries_are_well_formed(expr):
    for open_, close in ("()", "{}", "[]"):
        assert expr.count(open_) == expr.count(close), expr
    assert expr.count('"') % 2 == 0, expr
    for selector in re.findall(r"\{([^}]*)\}", expr):
        if selector.strip():  # every selector filters by the dashboard's session and run variables
            assert 'run=~"$run"' in selector and 'SessionName=~"$SessionName"' in selector, expr
    for name in re.findall(r"\brate\((\w+)", expr):
        assert name.endswith(("_total", "_bucket", "_count", "_sum")), f"rate() of {name}, not a counter: {expr}"


def test_layout_and_variables():
    assert DASHBOARD["uid"] and DASHBOARD["title"]
    ids = [p["id"] for p in PANELS]
    assert len(ids) == len(set(ids))
    for p in PANELS:
        assert p["datasource"] == "${datasource}" and p["targets"] and p["title"] and p["description"]
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24
        assert len({t["refId"] for t in p["targets"]}) == len(p["targets"])
    names = {v["name"] for v in DASHBOARD["templating"]["list"]}
    assert {"datasource", "SessionName", "run"} <= names


def test_no_panel_twice_and_none_overlapping():
    titles = [p["title"] for p in PANELS]
    assert len(titles) == len(set(titles)), titles
    cells: dict[tuple[int, int], str] = {}
    for p in PANELS:
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = p["title"]


def test_units_fit_what_is_plotted():
    for p in PANELS:
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit")
        exprs = " ".join(t["expr"] for t in p["targets"])
        assert unit, f"{p['title']!r} has no unit"
        if unit == "s":  # seconds: only durations and strategy time
            assert re.search(r"duration_seconds|strategy_(time_)?seconds", exprs), (p["title"], exprs)
        if "reports_total" in exprs:
            assert unit == "ops", p["title"]


def test_multi_objective_panels_only_in_their_collapsed_row():
    mo = {"ray_nas_hypervolume", "ray_nas_front_size"}
    top = [p for p in DASHBOARD["panels"] if p["type"] != "row"]
    assert not [p["title"] for p in top if mo & set().union(*(metric_names(t["expr"]) for t in p["targets"]))]
    (row,) = [r for r in ROWS if "Multi-objective" in r["title"]]
    assert row["collapsed"] and any(mo & metric_names(t["expr"]) for q in row["panels"] for t in q["targets"])
