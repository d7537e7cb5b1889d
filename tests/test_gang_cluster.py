"""docs/cluster.md's cluster recipe ("On a Ray cluster", "Ray and auth"), run on this machine: a head and a second node
started with ``ray start``, each with its own temp dir, joined with Ray's token (``RAY_AUTH_MODE=token`` and the token
in ``RAY_AUTH_TOKEN``: nothing is written to ~/.ray), then a search on it from a driver joined the same way. The nodes
sit at 127.0.0.2 and 127.0.0.3, two loopback addresses (Ray turns 127.0.0.1 into this machine's external address for
a multi-node cluster; these it keeps), so no traffic leaves the machine. The search trains each trial on a gang of 2
ranks placed SPREAD, so across both nodes; in its second trial the second node is removed (its ``ray start`` stopped),
and the search finishes on the head, the trial that ran there run again by a rebuilt gang.
Sized for a 2-core machine: 2 + 1 CPUs, one gang, one torch thread per rank."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
from pathlib import Path

import pytest

import nas

pytestmark = [pytest.mark.ray, pytest.mark.slow]

RAY = [sys.executable, "-m", "ray.scripts.scripts"]  # `ray`, run by this interpreter (its workers import nas)
HEAD, SECOND = "127.0.0.2", "127.0.0.3"

DRIVER = textwrap.dedent('''
    import os, sys, threading
    import nas
    from nas.search_spaces.toy import ToySpace
    from nas.train.fit import fit
    from nas.train.settings import TrainSettings

    address, directory, run_dir = sys.argv[1:4]

    def train(ctx):  # (defined in __main__: Ray ships it to the ranks by value)
        marker = os.path.join(directory, f"attempted-{ctx.trial.trial_id}-{ctx.rank}")
        if ctx.trial.trial_id == 1 and not os.path.exists(marker):  # its first attempt: say so, then wait
            open(marker, "w").close()
            with open(os.path.join(directory, f"started-{ctx.rank}"), "w") as f:
                f.write(f"{os.getpid()}\\n")
            threading.Event().wait()  # until the node goes, or the gang is torn down
        fit(ctx)  # DDP across the nodes

    df = nas.search(ToySpace(), "random", budget=4, workers=1, trial_workers=2, gang_strategy="SPREAD",
                    data="digits", settings=TrainSettings(epochs=1, batch_size=32), train=train, address=address,
                    seed=0, run_dir=run_dir)
    print("finished", len(df), "trials")
''')


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (from /proc), to stop exactly what a test started."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


class Node:
    """One ``ray start --block`` node: ready once it prints that its runtime started (a thread reads its output)."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([*RAY, "start", "--block", "--disable-usage-stats", *args], env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.output, self.up = "", threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            self.output += line
            if "Ray runtime started" in line:
                self.up.set()

    def wait_started(self, timeout: float = 90.0) -> None:
        if not self.up.wait(timeout):
            raise AssertionError(f"the node did not start within {timeout} s:\n{self.output}")

    def processes(self) -> list[int]:
        return descendants(self.proc.pid)

    def stop(self, grace: float = 20.0) -> None:
        """Stop the node as ``ray stop`` on its machine would (SIGTERM to each of its processes, the raylet leaving
        the cluster in good order), then kill what is left of it after ``grace`` seconds."""
        if self.proc.poll() is not None:
            return  # stopped (its pid may belong to another process by now)
        pids = self.processes()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=grace)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


@pytest.fixture
def cluster_env():
    """The environment of every node and of the driver: Ray's token auth with a token of the test's own."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32), RAY_USAGE_STATS_ENABLED="0")
    return env


def test_a_gang_spans_two_nodes_and_the_search_outlives_the_second(tmp_path, signals, cluster_env):
    temp = Path(tempfile.mkdtemp(prefix="nas-", dir="/tmp"))  # (short: Ray's socket paths must fit 107 bytes)
    started = [signals(f"started-{rank}") for rank in (0, 1)]
    port = free_port(HEAD)
    nodes: list[Node] = []
    driver = None
    try:
        nodes.append(head := Node(["--head", f"--node-ip-address={HEAD}", f"--port={port}", "--num-cpus=2",
                                   "--include-dashboard=false", f"--temp-dir={temp}/head"], cluster_env))
        nodes.append(second := Node([f"--address={HEAD}:{port}", f"--node-ip-address={SECOND}", "--num-cpus=1",
                                     f"--temp-dir={temp}/second"], cluster_env))  # (it waits for the head's GCS)
        head.wait_started()
        second.wait_started()
        with open(tmp_path / "driver.log", "w") as log:
            args = [f"{HEAD}:{port}", str(tmp_path), str(tmp_path / "run")]
            driver = subprocess.Popen([sys.executable, "-c", DRIVER, *args], env=cluster_env, stdout=log,
                                      stderr=subprocess.STDOUT)
        try:
            pids = [int(s.wait(timeout=90)) for s in started]  # trial 1 runs on both ranks: where?
        except AssertionError as e:
            raise AssertionError(f"{e}; the driver said:\n{(tmp_path / 'driver.log').read_text()}") from None
        on_second = [pid in second.processes() for pid in pids]
        assert sorted(on_second) == [False, True], (pids, on_second)  # one rank on each node
        second.stop()  # mid-trial: the rank there dies with its node
        assert driver.wait(timeout=120) == 0, (tmp_path / "driver.log").read_text()
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
        for node in nodes[::-1]:
            node.stop(grace=3)  # (the search is over: no need to wait for a graceful exit)
        shutil.rmtree(temp, ignore_errors=True)
    df = nas.load_results(tmp_path / "run").set_index("trial_id")
    assert len(df) == 4 and (df.state == "COMPLETE").all(), df[["state", "error"]]
    nodes = {t: df.loc[t].metrics["nodes"] for t in df.index}
    assert len(set(nodes[0])) == 2  # the first trial's gang spanned both nodes
    (head_node,) = set(nodes[1])  # the trial the removal interrupted ran again, both ranks on the head
    assert all(nodes[t] == [head_node, head_node] for t in (1, 2, 3))
    assert (tmp_path / "attempted-1-0").exists() and df.loc[1].worker == "nas-gang-0-rank-0"
