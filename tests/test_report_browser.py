"""The report in a real browser: headless Chromium renders it with no JavaScript error and draws every plot.

Two real runs: regularized evolution over the toy space's MLPs trained on digits (2 epochs: learning
curves), and evolution over NAS-Bench-201 cells scored by a function (cell drawings), where one cell
raises (a FAILED trial with its error). Skipped only where no Chromium is installed (``.ci/run`` installs
Debian's ``chromium`` package).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

import nas
from nas.monitor.page import write_report
from nas.search_spaces.nb201 import NB201Space
from nas.search_spaces.toy import ToySpace
from nas.train.settings import TrainSettings
from nas.train.simple import scored

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium installed (.ci/run installs Debian's chromium)")
FLAGS = ["--headless", "--disable-gpu", "--no-sandbox", "--enable-unsafe-swiftshader", "--hide-scrollbars",
         "--no-first-run", "--disable-extensions", "--disable-background-networking", "--virtual-time-budget=20000"]


def nb201_score(arch):
    if arch["edge_1_0"] == "none" and arch["edge_2_1"] != "none":
        raise RuntimeError("cell output is disconnected from node 1")
    return sum(op.startswith("nor_conv") for op in arch.values()) / 6


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    nas.search(ToySpace(), "evolution", budget=6, executor="inprocess", seed=0, run_dir=root / "toy",
               strategy_options={"population": 3, "sample_size": 2},
               settings=TrainSettings(epochs=2, batch_size=128, seed=0))
    nas.search(NB201Space(), "evolution", budget=40, executor="inprocess", seed=1, run_dir=root / "nb201",
               strategy_options={"population": 8, "sample_size": 3},
               data=None, train=scored(nb201_score))
    failed = nas.load_results(root / "nb201").state.eq("FAILED").sum()
    assert failed > 0  # (seed 1 proposes such cells)
    return write_report([root / "toy", root / "nb201"], root / "report.html", top=4)


class Plots(HTMLParser):
    """The page's plotly divs and, per div, the SVG/WebGL drawing plotly made in it."""

    def __init__(self) -> None:
        super().__init__()
        self.divs: dict[str, set[str]] = {}
        self.stack: list[str | None] = []
        self.errors = ""
        self._in_errors = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = set((a.get("class") or "").split())
        if tag == "div" and "plotly-graph-div" in classes:
            self.divs[a["id"]] = classes
            self.stack.append(a["id"])
        elif tag == "div":
            self.stack.append(None)
        owner = next((d for d in reversed(self.stack) if d), None)
        if owner and ("main-svg" in classes or tag == "canvas"):
            self.divs[owner].add("drawn")
        self._in_errors = a.get("id") == "js-errors"

    def handle_endtag(self, tag):
        if tag == "div" and self.stack:
            self.stack.pop()

    def handle_data(self, data):
        if self._in_errors:
            self.errors += data


def test_report_renders_in_chromium_without_errors_and_draws_every_plot(report):
    page = report.read_text()
    assert page.count("<script>") == 2 + page.count("Plotly.newPlot") and "cdn" not in page.split("<body>")[1][:5000]
    expected = set(re.findall(r'<div id="([^"]+)" class="plotly-graph-div"', page))
    assert {"compare-plot", "run0-plot1", "run1-plot3", "run1-plot4", "run1-arch1"} <= expected  # curves, parcoords..
    proc = subprocess.run([CHROMIUM, *FLAGS, "--enable-logging=stderr", "--v=0", "--dump-dom", report.as_uri()],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [ln for ln in proc.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    assert not [ln for ln in console if re.search(r"error|uncaught", ln, re.I)], console
    dom = Plots()
    dom.feed(proc.stdout)
    assert dom.errors.strip() == "", dom.errors  # window.onerror collected nothing
    assert set(dom.divs) == expected
    undrawn = sorted(d for d, classes in dom.divs.items() if not {"js-plotly-plot", "drawn"} <= classes)
    assert not undrawn, f"plots not drawn: {undrawn}"
    assert "cell output is disconnected from node 1" in proc.stdout  # the failed trial and its error are listed


def test_screenshot(report, tmp_path):
    shot = tmp_path / "report.png"
    subprocess.run([CHROMIUM, *FLAGS, f"--screenshot={shot}", "--window-size=1400,3000", report.as_uri()],
                   capture_output=True, timeout=240, check=True)
    from PIL import Image

    with Image.open(shot) as im:
        assert im.size == (1400, 3000)
        colours = im.convert("RGB").resize((140, 300)).getcolors(maxcolors=100000)
    assert colours is not None and len(colours) > 50  # drawn plots, not a blank page
