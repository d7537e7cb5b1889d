"""The run's final gauge values stay on Ray's real metrics export while `nas search --keep-dashboard` holds the
cluster, past the time after which Ray's metrics agent drops a gauge that no export refreshed.

One real `nas search --keep-dashboard` runs in a subprocess with its own private cluster (its own Ray temp folder)
and Ray's export interval set through Ray's own configuration variable to 1 s (Ray's floor), so that the agent's
eviction time, two export intervals, passes in seconds rather than the default 20 s. The test finds the node's
export endpoint as Prometheus does (Ray's service-discovery file), waits until the final values show, then keeps
scraping until three export intervals have passed and checks every scrape still carries them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import nas
from nas.monitor.gauge_hold import export_interval_s
from nas.monitor.metrics import scrape
from tests.helpers import kill_session, wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow]  # (about 25 s: a Ray cluster with its dashboard starts)

KEEPING = "keeping the Ray cluster up for inspection"
INTERVAL_MS = 1000  # Ray's metrics_report_interval_ms for the subprocess's cluster (RAY_<name>, as Ray reads it)


@pytest.fixture
def kept(tmp_path):
    """A finished `nas search --keep-dashboard` holding its cluster: (run directory, its Ray temp folder)."""
    temp = Path(tempfile.mkdtemp(prefix="nasmx", dir="/tmp"))  # (short: Ray's socket paths live under it)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_TMPDIR=str(temp), RAY_metrics_report_interval_ms=str(INTERVAL_MS), RAY_USAGE_STATS_ENABLED="0")
    run = tmp_path / "kept"
    proc = subprocess.Popen(
        [sys.executable, "-m", "nas.cli", "search", "--space", "toy", "--strategy", "random", "--budget", "2",
         "--workers", "1", "--epochs", "1", "--quiet", "--keep-dashboard", "--run-dir", str(run)],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # blocks on the pipe until the search has finished and the cluster is kept
            lines.append(line)
            if line.startswith(KEEPING):
                break
        else:
            pytest.fail(f"`nas search --keep-dashboard` ended ({proc.wait()}): {''.join(lines)[-3000:]}")
        yield run, temp / "ray"
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C: the search lets its cluster go
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=60)
        kill_session(proc.pid)  # whatever is left of it (Ray's processes also die with it: a parent-death signal)
        shutil.rmtree(temp, ignore_errors=True)


def test_final_gauges_stay_exported_while_keep_dashboard_holds_the_cluster(kept):
    run_dir, ray_temp = kept
    run = run_dir.name
    df = nas.load_results(run_dir)
    best = float(df[df.state == "COMPLETE"].score.max())  # (val_acc:max: the score is the accuracy itself)
    discovery = ray_temp / "session_latest" / "prom_metrics_service_discovery.json"

    def endpoints():
        with contextlib.suppress(OSError, ValueError):
            return [f"http://{t}/metrics" for entry in json.loads(discovery.read_text()) for t in entry["targets"]]
        return None

    seen: dict[str, dict] = {}  # (each endpoint's last scrape of the run's series, for a failure's message)

    def final(url: str) -> bool:
        with contextlib.suppress(OSError):
            samples = seen[url] = {(n, lab.get("objective")): v for n, lab, v in scrape(url) if lab.get("run") == run}
            return (samples.get(("ray_nas_best_value", "val_acc:max")) == best
                    and samples.get(("ray_nas_busy_workers", None)) == 0.0
                    and samples.get(("ray_nas_workers", None)) == 1.0
                    and samples.get(("ray_nas_budget", None)) == 2.0
                    and ("ray_nas_worker_utilization", None) in samples)
        return False

    # The file is read again at each try: it lists each process's export as it comes up, the dashboard's agent
    # (the node's export, which carries the run's series) among the last on a loaded machine.
    try:
        url = wait_until(lambda: next((u for u in endpoints() or [] if final(u)), None),
                         f"the run's final values on the endpoints of {discovery}", timeout=60, every=0.25)
    except AssertionError as e:
        raise AssertionError(f"{e}; best {best}; last seen: {seen}") from None
    interval = export_interval_s(INTERVAL_MS)  # Ray's emitter floors the interval at 1 s; the agent drops a
    hold_until = time.monotonic() + 3 * interval  # gauge two intervals after its last export: wait past that
    scrapes = 0
    while time.monotonic() < hold_until:
        if not final(url):
            left = sorted({n for n, lab, _ in scrape(url) if lab.get("run") == run})
            pytest.fail(f"the run's final values left the export {scrapes} scrapes after showing; left: {left}")
        scrapes += 1
        time.sleep(interval / 4)  # polling interval: several scrapes per export interval, bounded by hold_until
    assert final(url) and scrapes >= 8
