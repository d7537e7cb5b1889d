"""`nas report` on run directories whose journal holds what a search would not write (scores at the ends of the
float range, very wide architectures): the report is drawn, the panel it cannot draw says why."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

import nas
from nas.cli import main
from nas.monitor import importance
from tests.helpers import scored_toy_run


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """Eight toy architectures scored by a formula (no training)."""
    return scored_toy_run(tmp_path_factory.mktemp("hostile") / "run", 8)


def rewrite(src, dst, change) -> None:
    """Copy the run ``src`` to ``dst``, each journal record passed through ``change(record)``."""
    dst.mkdir()
    (dst / "run.json").write_bytes((src / "run.json").read_bytes())
    lines = [json.dumps(change(json.loads(line))) for line in (src / "trials.jsonl").read_text().splitlines()]
    (dst / "trials.jsonl").write_text("\n".join(lines) + "\n")


def extreme(rec):
    if rec["kind"] == "result" and rec["trial"]["trial_id"] in (1, 2):
        value = 1e308 if rec["trial"]["trial_id"] == 1 else -1e308
        rec["result"]["score"] = rec["result"]["metrics"]["val_acc"] = value
    return rec


def test_scores_whose_spread_is_not_finite_skip_the_importance_panel(finished, tmp_path, capsys):
    """(1e308 and -1e308 ended the report in optuna fANOVA's `assert variance >= 0.0`.)"""
    rewrite(finished, tmp_path / "run", extreme)
    assert main(["report", str(tmp_path / "run"), "--out", str(tmp_path / "r.html")]) == 0, capsys.readouterr().err
    page = (tmp_path / "r.html").read_text()
    assert "the scores&#x27; spread is not a finite number (from -1e+308 to 1e+308): the decisions are not ranked" \
        in page
    assert "Trial detail" in page


def test_a_very_wide_architecture_is_ranked_on_its_first_decisions(finished, tmp_path, capsys):
    """(10,000 decisions never finished: fANOVA's time grows with them.) A run of a user's space: its architectures'
    decisions come from their JSON."""
    width = importance.MAX_DECISIONS + 10

    def wide(rec):
        rec["trial"]["arch"] = {f"d{i:03}": (rec["trial"]["trial_id"] + i) % 3 for i in range(width)}
        return rec

    rewrite(finished, tmp_path / "run", wide)
    cfg = json.loads((tmp_path / "run" / "run.json").read_text())
    cfg["search"]["space"] = "mymod:Space"
    (tmp_path / "run" / "run.json").write_text(json.dumps(cfg))
    assert main(["report", str(tmp_path / "run"), "--out", str(tmp_path / "r.html")]) == 0, capsys.readouterr().err
    page = (tmp_path / "r.html").read_text()
    assert (f"ranked on the first {importance.MAX_DECISIONS} of the {width} decisions that vary (fANOVA&#x27;s "
            "time grows with both)") in page


def status_of(finished, tmp_path, **fields):
    run = tmp_path / "run"
    rewrite(finished, run, lambda rec: rec)
    status = {"state": "finished", "pid": 1, "host": "h", "updated": 1.0, "workers": 1, **fields}
    (run / "status.json").write_text(json.dumps(status))
    return run


@pytest.mark.parametrize(("field", "value", "why"), [
    ("elapsed", 1e308, "Expected `float` <= 1000000000000.0"), ("busy_seconds", -1.0, "Expected `float` >= 0.0"),
    ("elapsed", -5.0, "Expected `float` >= 0.0"), ("time_budget", 1e300, "Expected `float` <= 1000000000000.0")])
def test_status_durations_out_of_range_are_refused_naming_the_field(finished, tmp_path, capsys, field, value, why):
    """(elapsed 1e308 printed 300 digits; negative durations were taken as they were.)"""
    run = status_of(finished, tmp_path, **{field: value})
    assert main(["status", str(run)]) == 2
    assert capsys.readouterr().err.strip() == f"nas status: error: {run / 'status.json'}: {field}: {why}"


def test_a_wall_time_too_short_to_divide_by_leaves_utilization_unknown(finished, tmp_path, capsys):
    """(elapsed 1e-320 s with busy_seconds 100 printed 'worker utilization inf'.)"""
    run = status_of(finished, tmp_path, elapsed=1e-320, busy_seconds=100.0)
    assert main(["status", str(run)]) == 0
    out = capsys.readouterr().out
    assert "inf" not in out, out


@pytest.mark.parametrize("command", ["status", "report", "results", "best"])
def test_a_lone_surrogate_in_run_json_is_refused_naming_the_file_and_field(finished, tmp_path, capsys, command):
    """(valid JSON, but no character: "'utf-8' codec can't encode character '\\ud800'" naming no file.)"""
    run = tmp_path / "run"
    rewrite(finished, run, lambda rec: rec)
    text = (run / "run.json").read_text()
    (run / "run.json").write_text(text.replace('"strategy": "random"', '"strategy": "ran\\ud800dom"', 1))
    assert main([command, str(run)]) == 2
    assert capsys.readouterr().err.strip().endswith(
        f"{run / 'run.json'} is corrupt: search.strategy: a lone surrogate escape ('ran\\ud800dom'), which is no "
        "character")


@pytest.mark.parametrize("value", [{"a": 1}, "abc", [1, 2], True])
def test_a_metric_that_is_no_number_is_shown_as_missing(finished, tmp_path, capsys, value):
    """(val_loss {"a":1}, "abc" or [1,2] ended the report in a TypeError, "Unknown format code 'g' for object of type
    'str'" or "The truth value of an array ... is ambiguous", naming nothing.)"""
    def odd(rec):
        if rec["kind"] == "result":
            rec["result"]["metrics"]["val_loss"] = value
        return rec

    rewrite(finished, tmp_path / "run", odd)
    assert main(["report", str(tmp_path / "run"), "--out", str(tmp_path / "r.html")]) == 0, capsys.readouterr().err
    assert "<th onclick='sortTable(this)' title='sort'>val_loss</th>" in (tmp_path / "r.html").read_text()


ESC = "\x1b]0;PWNED\x07\x1b[2J\x1b[31m\n\t\x7f\x9b"
SHOWN = "\\x1b]0;PWNED\\x07\\x1b[2J\\x1b[31m\\x0a\\x09\\x7f\\x9b"


def escaping(rec):
    """Control characters in every kind of string a journal gives the terminal: an hparams key and value, a worker,
    a node, an error, a metric's name (the objective's, as run.json names it)."""
    rec["trial"]["hparams"] = {"h" + ESC: "v" + ESC}
    if rec["kind"] == "result":
        res = rec["result"]
        res["worker"], res["node"] = "w" + ESC, "n" + ESC
        res["metrics"]["m" + ESC] = "mv" + ESC
        res["metrics"]["val_acc" + ESC] = res["metrics"].get("val_acc")  # (the objective run.json names)
        if rec["trial"]["trial_id"] == 2:
            res.update(outcome="FAILED", failure="ERROR", error="err" + ESC, score=None)
    return rec


@pytest.mark.parametrize("command", [["results"], ["results", "--view", "arch"], ["best"], ["status"],
                                     ["best", "--pareto"]])
def test_control_characters_of_a_run_are_shown_not_sent_to_the_terminal(finished, tmp_path, capsys, monkeypatch,
                                                                         command):
    """(ESC sequences in a worker's name, an error, an hparams key or value, the strategy recoloured, retitled and
    cleared the user's terminal.)"""
    monkeypatch.setenv("COLUMNS", "2000")  # (every column of the table shown)
    run = tmp_path / "run"
    rewrite(finished, run, escaping)
    cfg = json.loads((run / "run.json").read_text())
    cfg["search"]["strategy"] = "random" + ESC
    cfg["search"]["objectives"] = ["val_acc" + ESC + ":max"]
    (run / "run.json").write_text(json.dumps(cfg))
    assert main([command[0], str(run), *command[1:]]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f]", out), out
    assert SHOWN in out, out


@pytest.mark.parametrize("command", [["--format", "csv"], ["--format", "json"]])
def test_the_exports_keep_control_characters_as_they_are(finished, tmp_path, capsys, command):
    run = tmp_path / "run"
    rewrite(finished, run, escaping)
    assert main(["results", str(run), *command]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "w" + ESC in out if command[1] == "csv" else "w" + ESC in {r["worker"] for r in json.loads(out)}


LINK = '<a href="https://evil.example">x</a><b>B</b><br><span style="font-size:80px">S</span>'
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
#: after the page loads, hover the first point of every trace of every plot in turn (plotly draws a hover label
#: only then), and after each hover count the links to evil.example in the page (an <a> of the SVG has xlink:href);
#: the counts end up in #probe
PROBE = """<script>window.addEventListener('load',function(){var hovers=[],seen=[];
document.querySelectorAll('.js-plotly-plot').forEach(function(gd){(gd.data||[]).forEach(function(tr,i){
hovers.push([gd,i]);});});var k=0;function next(){seen.push(Array.from(document.querySelectorAll('a'))
.filter(function(a){return a.outerHTML.indexOf('evil.example')>=0;}).length);
if(k>=hovers.length){var p=document.createElement('pre');p.id='probe';
p.textContent=JSON.stringify({hovers:hovers.length,links:seen,text:Array.from(document.querySelectorAll(
'.hoverlayer, .ytick, .legendtext')).map(function(e){return e.textContent;}).join('|')});
document.body.appendChild(p);return;}var h=hovers[k++];try{Plotly.Fx.hover(h[0],[{curveNumber:h[1],pointNumber:0}]);
}catch(e){}setTimeout(next,100);}next();});</script>"""


def linking(rec):
    """Markup plotly would draw as a live link, bold, a line break, a styled span: in a worker's and a node's name
    (the timeline's ticks), an architecture's metric name, an error (hover texts)."""
    if rec["kind"] == "result":
        res = rec["result"]
        res["worker"], res["node"] = "w" + LINK, "n" + LINK
        if rec["trial"]["trial_id"] == 2:
            res.update(outcome="FAILED", failure="ERROR", error="err" + LINK, score=None)
    return rec


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium installed (.ci/run installs Debian's chromium)")
def test_run_text_in_a_plot_is_shown_as_it_is_not_as_markup(finished, tmp_path, capsys):
    """(A worker's name in the timeline's ticks and an error in a hover text holding <a href="https://..."> were
    live links in the report; <b>, <br> and <span style> were drawn as markup.)"""
    run = tmp_path / "run"
    rewrite(finished, run, linking)
    assert main(["report", str(run), "--out", str(tmp_path / "r.html")]) == 0, capsys.readouterr().err
    page = (tmp_path / "r.html").read_text()
    (tmp_path / "probe.html").write_text(page.replace("<head>", "<head>" + PROBE, 1))
    proc = subprocess.run([CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--enable-unsafe-swiftshader",
                           "--no-first-run", "--disable-extensions", "--disable-background-networking",
                           "--virtual-time-budget=60000", "--dump-dom", (tmp_path / "probe.html").as_uri()],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = re.search(r"<pre id=\"probe\">(.*?)</pre>", proc.stdout, re.S)
    assert found, proc.stdout[-3000:]
    import html

    probe = json.loads(html.unescape(found.group(1)))
    assert probe["hovers"] > 10 and set(probe["links"]) == {0}, probe
    assert "w" + LINK in probe["text"] and "err" + LINK in probe["text"], probe["text"]  # (shown as written)


@pytest.fixture(scope="module")
def nb201_run(tmp_path_factory):
    """Five NAS-Bench-201 cells answered from the table (the space checks every architecture it formats)."""
    path = tmp_path_factory.mktemp("nb201") / "run"
    nas.search("nb201", "random", budget=5, executor="simulated", seed=0, run_dir=path, progress=False)
    return path


@pytest.mark.parametrize(("change", "why"), [
    ({"kX": "none"}, "architecture keys do not match the space: missing [], unknown ['kX']"),
    ({"edge_1_0": "conv_9x9"}, "decision 'edge_1_0' has value 'conv_9x9'")])
def test_an_architecture_not_of_the_space_is_named_by_its_file_and_trial(nb201_run, tmp_path, capsys, change, why):
    """(An unknown decision or value said "architecture keys do not match the space ..." naming no file or trial.)"""
    def unfit(rec):
        if rec["trial"]["trial_id"] == 3:
            rec["trial"]["arch"] = {**rec["trial"]["arch"], **change}
        return rec

    rewrite(nb201_run, tmp_path / "run", unfit)
    assert main(["report", str(tmp_path / "run"), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"nas report: error: {tmp_path / 'run' / 'trials.jsonl'}: trial 3's architecture is not one "
                          f"of the run's space: {why}"), err
    assert len(err.splitlines()) == 1 and not (tmp_path / "r.html").exists()
