"""The local cluster a `nas search` starts, attacked as another machine and another user would.

One real `nas search --keep-dashboard` runs in a subprocess with Ray's authentication as in production (no
RAY_AUTH_MODE in its environment; its own HOME, where Ray writes the token). Where the test can (as root, with `ip`),
it runs inside a network namespace the test creates, joined to this one by a veth pair whose inner end has an
address of its own: "another machine" then connects to that address, which exists only inside the test's namespace
(no traffic leaves for any other address: only loopback, and that namespace). Clients on "the machine" itself run
inside the namespace and use its 127.0.0.1. Once the search says it is keeping the cluster up, clients try to join
it: without the token, through the namespace's outer address and through 127.0.0.1 (both refused, and the task each
would run never writes its marker), and with the token through 127.0.0.1 (joins: the control showing that a joined
client's task would be seen). The listening sockets of the processes it started (read with psutil) are compared
with nas.engine.cluster.LOCAL_LISTENERS, which docs/cluster.md mirrors: all on loopback.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import ray  # noqa: F401  (puts Ray's bundled psutil on the path)

from nas.engine.cluster import LOCAL_LISTENERS, SINGLE_NODE_ENV, Listener
from tests.helpers import kill_session

pytestmark = pytest.mark.ray

README = Path(__file__).resolve().parent.parent / "README.md"
CLUSTER_DOC = README.parent / "docs" / "cluster.md"  # (the README's "Ray and auth" section moved there)
KEEPING = "keeping the Ray cluster up for inspection"
#: a client on this machine must also tell Ray to keep 127.0.0.1 (else Ray dials the external address instead)
LOCAL_CLIENT = {SINGLE_NODE_ENV: "0"}
AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS")
#: a refused client's patience (Ray's config by environment): 2 s per connection attempt, gone after 3 s without the
#: GCS, 2 tries of the connect loop, where Ray's defaults retry for 20 s to minutes; the cluster keeps its defaults
IMPATIENT = {"RAY_gcs_rpc_server_connect_timeout_s": "2", "RAY_gcs_rpc_server_reconnect_timeout_s": "3",
             "RAY_gcs_server_port_wait_time_s": "2"}

CLIENT = textwrap.dedent("""
    import pathlib, sys
    import ray
    ray.init(address=sys.argv[1], log_to_driver=False)

    @ray.remote
    def touch(path):
        pathlib.Path(path).touch()
        return "ran"

    print("JOINED", ray.get(touch.remote(sys.argv[2]), timeout=120), flush=True)
""")


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in AUTH_VARS}
    return {**env, "HOME": str(home), "RAY_USAGE_STATS_ENABLED": "0", **extra}


class Namespace:
    """A network namespace of this test's own with a veth pair: ``address`` (inside it) is reachable from here
    through the pair and nowhere else. ``prefix`` runs a command inside it. Removed on :meth:`close`."""

    def __init__(self) -> None:
        tag = f"{os.getpid() % 100000}"
        self.name, self.outer, self.inner = f"nas-sec-{tag}", f"nsh{tag}", f"nsn{tag}"
        self.address, self.host = "169.254.213.2", "169.254.213.1"
        steps = [["ip", "netns", "add", self.name],
                 ["ip", "link", "add", self.outer, "type", "veth", "peer", "name", self.inner],
                 ["ip", "link", "set", self.inner, "netns", self.name],
                 ["ip", "addr", "add", f"{self.host}/30", "dev", self.outer],
                 ["ip", "link", "set", self.outer, "up"],
                 [*self.prefix, "ip", "addr", "add", f"{self.address}/30", "dev", self.inner],
                 [*self.prefix, "ip", "link", "set", self.inner, "up"],
                 [*self.prefix, "ip", "link", "set", "lo", "up"]]
        for step in steps:
            proc = subprocess.run(step, capture_output=True, text=True)
            if proc.returncode != 0:
                self.close()
                raise OSError(f"{' '.join(step)}: {proc.stderr.strip()}")

    @property
    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def close(self) -> None:
        subprocess.run(["ip", "link", "del", self.outer], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


def make_namespace() -> tuple[Namespace | None, str]:
    """The test's namespace, or None and why not (not root, no `ip`, no namespaces in this sandbox)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return None, "needs root and `ip` to create a network namespace of its own"
    try:
        return Namespace(), ""
    except OSError as e:
        return None, f"cannot create a network namespace here: {e}"


def tree(pid: int) -> list:
    import psutil  # Ray's bundled copy: on the path once ray is imported (above)

    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]




@pytest.fixture(scope="module")
def namespace():
    ns, why = make_namespace()
    yield ns, why
    if ns is not None:
        ns.close()


@pytest.fixture(scope="module")
def search(tmp_path_factory, namespace):
    """A finished `nas search --keep-dashboard`, its cluster still up: (process, its tree, tmp dir, home, output,
    the command prefix that runs a client beside it: inside the test's namespace where there is one)."""
    ns, _ = namespace
    prefix = ns.prefix if ns is not None else []
    tmp = tmp_path_factory.mktemp("secure")
    home = tmp / "home"
    home.mkdir()
    stderr = (tmp / "stderr.txt").open("w")
    proc = subprocess.Popen(
        [*prefix, sys.executable, "-m", "nas.cli", "search", "--space", "toy", "--strategy", "random", "--budget",
         "2", "--workers", "1", "--epochs", "1", "--quiet", "--keep-dashboard", "--run-dir", str(tmp / "run")],
        env=clean_env(home), cwd=tmp, stdout=subprocess.PIPE, stderr=stderr, text=True, start_new_session=True)
    lines = []
    try:
        for line in proc.stdout:  # blocks on the pipe until the search has finished and the cluster is kept
            lines.append(line)
            if line.startswith(KEEPING):
                break
        else:
            pytest.fail(f"`nas search --keep-dashboard` ended ({proc.wait()}): {''.join(lines)}"
                        f"{(tmp / 'stderr.txt').read_text()[-3000:]}")
        yield proc, tree(proc.pid), tmp, home, "".join(lines), prefix
    finally:
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=60)
        kill_session(proc.pid)
        stderr.close()


LISTENERS = textwrap.dedent("""
    import json, sys
    import ray  # noqa: F401  (puts Ray's bundled psutil on the path)
    import psutil
    pids = set(json.loads(sys.argv[1]))
    print(json.dumps([[c.pid, c.laddr.ip, c.laddr.port] for c in psutil.net_connections(kind="inet")
                      if c.status == "LISTEN" and c.pid in pids]))
""")


def listening(procs, prefix: list[str]) -> list[tuple[object, str, int]]:
    """The listening sockets of ``procs`` (psutil, run with ``prefix``: in their network namespace, whose sockets
    only a process inside it can list)."""
    import json

    by_pid = {p.pid: p for p in procs}
    out = subprocess.run([*prefix, sys.executable, "-c", LISTENERS, json.dumps(sorted(by_pid))], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    return [(by_pid[pid], ip, port) for pid, ip, port in json.loads(out)]


def listener_of(proc, driver_pid: int) -> Listener | None:
    """The LOCAL_LISTENERS entry a process is (the most specific fragment of its name or command line)."""
    if proc.pid == driver_pid:
        return next(e for e in LOCAL_LISTENERS if e.process == "driver")
    text = " ".join([proc.name(), *proc.cmdline()])
    hits = [e for e in LOCAL_LISTENERS if e.process != "driver" and e.process in text]
    return max(hits, key=lambda e: len(e.process), default=None)


def gcs_port(procs, prefix: list[str]) -> int:
    ports = [port for p, _, port in listening(procs, prefix) if p.name() == "gcs_server"]
    assert len(ports) == 1, ports
    return ports[0]


def client(address: str, marker: Path, env: dict[str, str], wait: float = 120,
           prefix: list[str] | None = None) -> tuple[int | None, str, str]:
    """A Ray driver joining ``address`` (run with ``prefix``: inside the test's namespace) and running a task that
    touches ``marker``: (exit status, or None when it was still trying to connect after ``wait`` seconds and was
    killed; stdout; stderr)."""
    proc = subprocess.Popen([*(prefix or []), sys.executable, "-c", CLIENT, address, str(marker)], env=env,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=wait)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        kill_session(proc.pid)
        out, err = proc.communicate()
        return None, out, err


def test_search_prints_dashboard_url_on_loopback(search):
    out = search[4]
    urls = re.findall(r"Ray dashboard: (\S+)", out)
    assert len(urls) == 1 and urls[0].startswith("http://127.0.0.1:"), out
    assert "finished 2 trials" in out


def test_client_without_token_through_another_address_is_refused(search, namespace, tmp_path):
    """From outside the namespace, through its own address (the only one besides loopback it has): every port of
    the cluster refuses the connection, and a Ray client does not join."""
    ns, why = namespace
    if ns is None:
        pytest.skip(why)
    _, procs, _, _, _, prefix = search
    ports = {port for _, _, port in listening(procs, prefix)}
    assert ports
    for port in sorted(ports):  # nothing answers on the namespace's address, on any of the cluster's ports
        with pytest.raises(ConnectionRefusedError), socket.create_connection((ns.address, port), timeout=10):
            pytest.fail(f"port {port} answers on {ns.address}")
    marker = tmp_path / "ran-from-outside"
    (tmp_path / "nobody").mkdir()
    # an impatient client gives up by itself within seconds (else it is stopped after 30 s)
    status, out, err = client(f"{ns.address}:{gcs_port(procs, prefix)}", marker,
                              clean_env(tmp_path / "nobody", **IMPATIENT), wait=30)
    assert status != 0 and "JOINED" not in out, out + err[-2000:]
    assert not marker.exists()


def test_client_without_token_through_loopback_is_refused_by_token_auth(search, tmp_path):
    _, procs, _, _, _, prefix = search
    marker = tmp_path / "ran-without-token"
    (tmp_path / "nobody").mkdir()
    status, out, err = client(f"127.0.0.1:{gcs_port(procs, prefix)}", marker,
                              LOCAL_CLIENT | clean_env(tmp_path / "nobody", **IMPATIENT), prefix=prefix)
    assert status != 0 and "JOINED" not in out, out + err[-2000:]
    assert re.search(r"(?i)unauthenticated|authentication", err), err[-2000:]
    assert not marker.exists()


def test_client_with_the_token_through_loopback_joins(search, tmp_path):
    """The control: a client holding the token (as a user of the cluster would) joins and its task runs."""
    _, procs, _, home, _, prefix = search
    marker = tmp_path / "ran-with-token"
    env = LOCAL_CLIENT | clean_env(home, RAY_AUTH_MODE="token")
    status, out, err = client(f"127.0.0.1:{gcs_port(procs, prefix)}", marker, env, prefix=prefix)
    assert status == 0 and "JOINED ran" in out, err[-2000:]
    assert marker.exists()


def test_listening_sockets_are_the_documented_ones_on_loopback(search):
    proc, procs, _, _, _, prefix = search
    sockets = listening(procs, prefix)
    assert sockets, "found no listening socket: psutil cannot see the cluster's processes"
    seen, unknown, exposed = set(), [], []
    for p, ip, port in sockets:
        entry = listener_of(p, proc.pid)
        if entry is None:
            unknown.append((p.name(), " ".join(p.cmdline())[:120], ip, port))
        else:
            seen.add(entry.service)
        if not ipaddress.ip_address(ip.removeprefix("::ffff:")).is_loopback:
            exposed.append((p.name(), ip, port))
    assert not exposed, f"listening beyond loopback: {exposed}"
    assert not unknown, f"listening sockets not in LOCAL_LISTENERS (and docs/cluster.md): {unknown}"
    # always there; the workers' and the fixed metrics ports (44217, 44227) depend on the moment and on
    # whether another cluster on this machine holds the port
    required = {"GCS server", "raylet", "core worker of the driver", "dashboard agent", "runtime-env agent",
                "dashboard"}
    assert required <= seen, f"missing: {required - seen}"


def test_docs_list_every_listener():
    text = CLUSTER_DOC.read_text()
    section = text[text.index("## Ray and auth"):]
    section = section[:section.index("\n## ")] if "\n## " in section else section
    missing = [e.service for e in LOCAL_LISTENERS if e.service not in section or e.port not in section]
    assert not missing, f"docs/cluster.md's 'Ray and auth' lacks {missing} (or its port text)"
    others = [README, *CLUSTER_DOC.parent.glob("*.md")]
    assert "disabled" in section and not any("RAY_AUTH_MODE=disabled" in p.read_text().replace(section, "")
                                             for p in others)


DASHBOARD_CLIENT = textwrap.dedent("""
    import json, sys, urllib.error, urllib.request
    url, token = sys.argv[1], sys.argv[2] or None
    request = urllib.request.Request(f"{url}/api/jobs/", headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            print(json.dumps([response.status, json.loads(response.read())]))
    except urllib.error.HTTPError as e:
        print(json.dumps([e.code, []]))
""")


def dashboard_jobs(url: str, token: str | None, prefix: list[str]) -> tuple[int, list]:
    """The dashboard's job list, asked on loopback beside the cluster (inside the test's namespace, if any)."""
    import json

    out = subprocess.run([*prefix, sys.executable, "-c", DASHBOARD_CLIENT, url, token or ""], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    status, jobs = json.loads(out)
    return status, jobs


def test_dashboard_wants_the_token_and_names_the_job_after_the_run(search):
    _, _, _, home, out, prefix = search
    url = re.findall(r"Ray dashboard: (\S+)", out)[0]
    status, _ = dashboard_jobs(url, None, prefix)
    assert status in (401, 403)
    status, jobs = dashboard_jobs(url, (home / ".ray" / "auth_token").read_text().strip(), prefix)
    # the search's driver job, named after its run directory (the control client above joined as a job too)
    assert status == 200 and "run" in [job["metadata"].get("job_name") for job in jobs], jobs


def test_token_file_is_readable_by_its_owner_only(search):
    home = search[3]
    assert (home / ".ray" / "auth_token").stat().st_mode & 0o777 == 0o600
