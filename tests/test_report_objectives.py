"""The report names the run's objectives wherever it draws trials' results, in their own units and direction, and
draws each objective of a multi-objective run (one panel per objective), never "score".

Two simulated NAS-Bench-201 runs (the shipped table: a second or two each): regularized evolution on accuracy
and latency (parents: a genealogy), and random search minimising latency alone.
"""

from __future__ import annotations

import json
import re

import pytest

import nas
from nas.monitor import figures
from nas.monitor.page import write_report
from nas.monitor.tables import objective_values

MO = ["val_acc:max", "latency_ms:min"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("objectives")
    nas.search("nb201", "evolution", budget=24, executor="simulated", data=None, seed=0, run_dir=root / "mo",
               objectives=MO, strategy_options={"population": 8, "sample_size": 3})
    nas.search("nb201", "random", budget=12, executor="simulated", data=None, seed=0, run_dir=root / "fast",
               objectives=["latency_ms:min"])
    return root


def plot_texts(page: str) -> list[str]:
    """Every title (of a plot, an axis or a colour bar) and trace name in the page's plotly figures."""
    texts = re.findall(r'"title":\{"text":"((?:[^"\\]|\\.)*)"', page)
    texts += re.findall(r'"title":"((?:[^"\\]|\\.)*)"', page)  # (plotly's short form)
    texts += re.findall(r'"name":"((?:[^"\\]|\\.)*)"', page)
    return [json.loads(f'"{t}"') for t in texts]


def test_a_multi_objective_report_draws_each_objective_by_name(runs, tmp_path):
    page = write_report(runs / "mo", tmp_path / "mo.html").read_text()
    for metric in ("val_acc", "latency_ms"):
        assert f"<h3>Best {metric} so far and every trial</h3>" in page
        assert f"<h3>Genealogy by {metric}</h3>" in page and f"<h3>Decision importance for {metric}</h3>" in page
        assert re.search(rf"best {metric} [0-9.]+ \(trial \d+\)", page), metric  # the headline, each objective
    texts = plot_texts(page)
    for title in ("Best val_acc so far and every trial", "Best latency_ms so far and every trial",
                  "val_acc (higher is better)", "latency_ms (lower is better)"):
        assert title in texts, title
    assert any(t.startswith("Genealogy by latency_ms") for t in texts)
    assert any("Decisions against val_acc (higher is better), latency_ms (lower is better)" in t for t in texts)
    assert not [t for t in texts if "score" in t.lower()]
    assert "<th onclick='sortTable(this)' title='sort'>latency_ms</th>" in page  # the trial table, per objective


def test_a_minimised_objective_is_drawn_in_its_own_units(runs, tmp_path):
    df = nas.load_results(runs / "fast")
    fig = figures.best_so_far({"fast": (df, objective_values(df, ["latency_ms:min"]).latency_ms)}, "latency_ms:min")
    trials, best = fig.data[0].y, fig.data[1].y
    assert min(trials) > 0 and list(best) == sorted(best, reverse=True)  # a latency, and its best falls
    assert fig.layout.yaxis.title.text == "latency_ms (lower is better)"
    page = write_report(runs / "fast", tmp_path / "fast.html").read_text()
    assert not [t for t in plot_texts(page) if "score" in t.lower()]
    assert "<h3>Decisions against latency_ms</h3>" in page


def test_the_live_line_shows_the_best_by_the_objectives_name_in_its_units(tmp_path):
    import io

    from nas.monitor.progress import SearchProgress, api_progress

    stream = io.StringIO()
    df = nas.search("nb201", "random", budget=6, executor="simulated", data=None, seed=0, run_dir=tmp_path / "r",
                    objectives=["latency_ms:min"], callbacks=[SearchProgress(stream, objectives=["latency_ms:min"])])
    best = df[df.state == "COMPLETE"].metrics.map(lambda m: m["latency_ms"]).min()
    assert f"best latency_ms {best:.4f}, busy " in stream.getvalue().splitlines()[-1]  # not negated
    (shown,) = api_progress(True, (), ["val_acc:max", "latency_ms:min"])  # what nas.search(progress=True) adds
    assert shown.objective == "val_acc:max"
