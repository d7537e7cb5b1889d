"""The local cluster a `nas search` starts, attacked as another machine and another user would.

One real `nas search --keep-dashboard` runs in a subprocess with Ray's authentication as in production (no
RAY_AUTH_MODE in its environment; its own HOME, where Ray writes the token). Once it says it is keeping the cluster
up, clients try to join it: without the token, through a non-loopback address of this machine and through
127.0.0.1 (both refused, and the task each would run never writes its marker), and with the token through
127.0.0.1 (joins: the control showing that a joined client's task would be seen). Then the listening sockets of
the processes it started are compared with nas.engine.cluster.LOCAL_LISTENERS, which the README mirrors.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import ray  # noqa: F401  (puts Ray's bundled psutil on the path)

from nas.engine.cluster import LOCAL_LISTENERS, SINGLE_NODE_ENV, Listener

pytestmark = pytest.mark.ray

README = Path(__file__).resolve().parent.parent / "README.md"
KEEPING = "keeping the Ray cluster up for inspection"
#: a client on this machine must also tell Ray to keep 127.0.0.1 (else Ray dials the external address instead)
LOCAL_CLIENT = {SINGLE_NODE_ENV: "0"}
AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS")

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


def external_ipv4() -> str | None:
    """A non-loopback IPv4 address of this machine (the one its default route uses, else any of its names')."""
    candidates = []
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing interface
        candidates.append(s.getsockname()[0])
    with contextlib.suppress(OSError):
        candidates += socket.gethostbyname_ex(socket.gethostname())[2]
    return next((ip for ip in candidates if not ipaddress.ip_address(ip).is_loopback), None)


def tree(pid: int) -> list:
    import psutil  # Ray's bundled copy: on the path once ray is imported (above)

    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def kill_session(sid: int) -> None:
    """SIGKILL whatever is left of the processes our `nas search` started (its own session; nobody else's)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.getsid(int(entry)) == sid:
                    os.kill(int(entry), signal.SIGKILL)


@pytest.fixture(scope="module")
def search(tmp_path_factory):
    """A finished `nas search --keep-dashboard`, its cluster still up: (process, its tree, tmp dir, home)."""
    tmp = tmp_path_factory.mktemp("secure")
    home = tmp / "home"
    home.mkdir()
    stderr = (tmp / "stderr.txt").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "nas.cli", "search", "--space", "toy", "--strategy", "random", "--budget", "2",
         "--workers", "1", "--epochs", "1", "--quiet", "--keep-dashboard", "--run-dir", str(tmp / "run")],
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
        yield proc, tree(proc.pid), tmp, home, "".join(lines)
    finally:
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=60)
        kill_session(proc.pid)
        stderr.close()


def listening(procs) -> list[tuple[object, str, int]]:
    out = []
    for p in procs:
        with contextlib.suppress(Exception):  # a process that ended meanwhile
            out += [(p, c.laddr.ip, c.laddr.port) for c in p.net_connections(kind="inet") if c.status == "LISTEN"]
    return out


def listener_of(proc, driver_pid: int) -> Listener | None:
    """The LOCAL_LISTENERS entry a process is (the most specific fragment of its name or command line)."""
    if proc.pid == driver_pid:
        return next(e for e in LOCAL_LISTENERS if e.process == "driver")
    text = " ".join([proc.name(), *proc.cmdline()])
    hits = [e for e in LOCAL_LISTENERS if e.process != "driver" and e.process in text]
    return max(hits, key=lambda e: len(e.process), default=None)


def gcs_port(procs) -> int:
    ports = [port for p, _, port in listening(procs) if p.name() == "gcs_server"]
    assert len(ports) == 1, ports
    return ports[0]


def client(address: str, marker: Path, env: dict[str, str], wait: float = 120) -> tuple[int | None, str, str]:
    """A Ray driver joining ``address`` and running a task that touches ``marker``: (exit status, or None when it
    was still trying to connect after ``wait`` seconds and was killed; stdout; stderr)."""
    proc = subprocess.Popen([sys.executable, "-c", CLIENT, address, str(marker)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=wait)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        kill_session(proc.pid)
        out, err = proc.communicate()
        return None, out, err


def test_search_prints_dashboard_url_on_loopback(search):
    _, _, _, _, out = search
    urls = re.findall(r"Ray dashboard: (\S+)", out)
    assert len(urls) == 1 and urls[0].startswith("http://127.0.0.1:"), out
    assert "finished 2 trials" in out


def test_client_without_token_through_external_address_is_refused(search, tmp_path):
    ip = external_ipv4()
    if ip is None:
        pytest.skip("this machine has no non-loopback IPv4 address to connect through")
    _, procs, _, _, _ = search
    import psutil

    ours = {p.pid for p in procs}
    # fixed ports (52365, 44217, ...) may also be held by other Ray clusters on this machine: those answer for them
    others = {c.laddr.port for c in psutil.net_connections(kind="inet") if c.status == "LISTEN" and c.pid not in ours}
    ports = {port for _, _, port in listening(procs)} - others
    assert ports
    for port in sorted(ports):  # nothing answers on the external address, on any of the cluster's ports
        with pytest.raises(ConnectionRefusedError), socket.create_connection((ip, port), timeout=10):
            pytest.fail(f"port {port} answers on {ip}")
    marker = tmp_path / "ran-from-outside"
    (tmp_path / "nobody").mkdir()
    # Ray's client retries a refused GCS for minutes: after 30 s without a connection it is stopped
    status, out, err = client(f"{ip}:{gcs_port(procs)}", marker, clean_env(tmp_path / "nobody"), wait=30)
    assert status != 0 and "JOINED" not in out, out + err[-2000:]
    assert not marker.exists()


def test_client_without_token_through_loopback_is_refused_by_token_auth(search, tmp_path):
    _, procs, _, _, _ = search
    marker = tmp_path / "ran-without-token"
    (tmp_path / "nobody").mkdir()
    status, out, err = client(f"127.0.0.1:{gcs_port(procs)}", marker, LOCAL_CLIENT | clean_env(tmp_path / "nobody"))
    assert status != 0 and "JOINED" not in out, out + err[-2000:]
    assert re.search(r"(?i)unauthenticated|authentication", err), err[-2000:]
    assert not marker.exists()


def test_client_with_the_token_through_loopback_joins(search, tmp_path):
    """The control: a client holding the token (as a user of the cluster would) joins and its task runs."""
    _, procs, _, home, _ = search
    marker = tmp_path / "ran-with-token"
    env = LOCAL_CLIENT | clean_env(home, RAY_AUTH_MODE="token")
    status, out, err = client(f"127.0.0.1:{gcs_port(procs)}", marker, env)
    assert status == 0 and "JOINED ran" in out, err[-2000:]
    assert marker.exists()


def test_listening_sockets_are_the_documented_ones_on_loopback(search):
    proc, procs, _, _, _ = search
    sockets = listening(procs)
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
    assert not unknown, f"listening sockets not in LOCAL_LISTENERS (and the README): {unknown}"
    # always there; the workers' and the fixed metrics ports (44217, 44227) depend on the moment and on
    # whether another cluster on this machine holds the port
    required = {"GCS server", "raylet", "core worker of the driver", "dashboard agent", "runtime-env agent",
                "dashboard"}
    assert required <= seen, f"missing: {required - seen}"


def test_readme_lists_every_listener():
    text = README.read_text()
    section = text[text.index("### Ray and auth"):]
    section = section[:section.index("\n## ")]
    missing = [e.service for e in LOCAL_LISTENERS if e.service not in section or e.port not in section]
    assert not missing, f"README's 'Ray and auth' lacks {missing} (or its port text)"
    assert "RAY_AUTH_MODE=disabled" not in text.replace(section, "") and "disabled" in section


def dashboard_jobs(url: str, token: str | None) -> tuple[int, list]:
    import json
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"{url}/api/jobs/", headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, []


def test_dashboard_wants_the_token_and_names_the_job_after_the_run(search):
    _, _, _, home, out = search
    url = re.findall(r"Ray dashboard: (\S+)", out)[0]
    status, _ = dashboard_jobs(url, None)
    assert status in (401, 403)
    status, jobs = dashboard_jobs(url, (home / ".ray" / "auth_token").read_text().strip())
    # the search's driver job, named after its run directory (the control client above joined as a job too)
    assert status == 200 and "run" in [job["metadata"].get("job_name") for job in jobs], jobs


def test_token_file_is_readable_by_its_owner_only(search):
    _, _, _, home, _ = search
    assert (home / ".ray" / "auth_token").stat().st_mode & 0o777 == 0o600
