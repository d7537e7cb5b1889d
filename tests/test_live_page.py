"""`nas serve`: the live page of a run while its search runs, in headless Chromium.

A child process runs a scripted in-process search whose fourth trial holds (reports its first epoch, says so on
stdout, then reads its stdin until the test closes it), so the page is looked at while a trial is certainly
running. `nas serve` runs as its own process on 127.0.0.1 and is stopped by its pid. Checked: a request without
the token is refused; the printed URL renders in Chromium with no console error, every plot drawn, the running trial in
"Running now"; a trial's page shows its curve and its parent link; the pages load no script from elsewhere.
Skipped only where no Chromium is installed (``.ci/run`` installs Debian's ``chromium``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request

import pytest

from nas.monitor.live import running_now
from tests.test_report_browser import CHROMIUM, FLAGS, Plots

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium installed (.ci/run installs Debian's chromium)")

SEARCH = textwrap.dedent("""
    import sys
    import nas
    from nas.search_spaces.toy import ToySpace, toy_score

    run_dir = sys.argv[1]

    def train(ctx):
        for epoch in (1, 2, 3):
            ctx.report(epoch=epoch, val_acc=toy_score(ctx.trial.arch) * epoch / 3)
            if ctx.trial.trial_id == 3 and epoch == 1:
                print("HELD", flush=True)  # trial 3's first epoch is journaled: the test may look now
                sys.stdin.read()  # held until the test closes this pipe (it has looked at the page, or failed)

    nas.search(ToySpace(), "evolution", budget=6, executor="inprocess", seed=0, data=None, run_dir=run_dir,
               strategy_options={"population": 3, "sample_size": 2}, train=train, progress=False)
""")


def _chromium(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CHROMIUM, *FLAGS, "--enable-logging=stderr", "--v=0", "--dump-dom", url],
                          capture_output=True, text=True, timeout=240)


def test_live_page_while_a_search_runs(tmp_path):
    run_dir = tmp_path / "run"
    search = subprocess.Popen([sys.executable, "-c", SEARCH, str(run_dir)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert search.stdin is not None and search.stdout is not None
    serve, said = None, []
    try:
        for line in search.stdout:  # until trial 3 says it is held (or the search ends: then the test fails)
            said.append(line)
            if line.strip() == "HELD":
                break
        assert said and said[-1].strip() == "HELD", "".join(said)
        held = running_now(run_dir).set_index("trial")
        assert int(held.epoch.get(3, 0)) == 1, held  # the run directory shows it running, at its first epoch
        serve = subprocess.Popen([sys.executable, "-m", "nas.cli", "serve", str(run_dir), "--refresh", "30"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert serve.stdout is not None
        serve.stdout.readline()
        url = serve.stdout.readline().strip()
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/\?token=[\w-]{20,}", url), url
        base = url.split("?")[0]
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(base, timeout=30)
        assert refused.value.code == 403

        proc = _chromium(url)
        assert proc.returncode == 0, proc.stderr[-2000:]
        console = [ln for ln in proc.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
        assert not [ln for ln in console if re.search(r"error|uncaught", ln, re.I)], console
        dom = Plots()
        dom.feed(proc.stdout)
        assert dom.errors.strip() == "" and dom.divs, dom.errors
        assert not [d for d, c in dom.divs.items() if not {"js-plotly-plot", "drawn"} <= c]
        running = proc.stdout.split("Running now: 1 running")[1].split("</table>")[0]
        assert re.search(r"<tr><td>3</td><td>running</td><td>1</td>", running), running  # the held trial, epoch 1
        assert not re.search(r"<script[^>]+src=['\"]https?:", proc.stdout)  # offline: plotly from this server

        done = int(running_now(run_dir).trial.min()) - 1  # a finished trial before it
        page = _chromium(f"{base}?token={url.split('token=')[1]}".replace("/?", f"/trial/{done}?", 1))
        assert page.returncode == 0 and f"<h1>trial {done}</h1>" in page.stdout, page.stdout[-2000:]
        assert "learning curve" in page.stdout and "back to the run" in page.stdout
    finally:
        if serve is not None:
            os.kill(serve.pid, 15)  # (its own pid)
            serve.wait(timeout=30)
        out, _ = search.communicate(timeout=180)  # (closes its stdin first: trial 3 goes on)
    assert search.returncode == 0, "".join(said) + out
