"""`nas serve`'s answers to requests it must refuse or cannot build a page for, from a server in this process (no
browser): the token compared as bytes, trial ids that are no int64, a cookie per server, a run it cannot read."""

from __future__ import annotations

import http.client
import shutil
import threading

import pytest

from nas.cli import main
from nas.monitor.live import LiveServer
from tests.helpers import scored_toy_run


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """Six toy architectures scored by a formula (no training)."""
    return scored_toy_run(tmp_path_factory.mktemp("serve") / "run", 6)


@pytest.fixture
def run_dir(finished, tmp_path):
    path = tmp_path / "run"
    shutil.copytree(finished, path)
    return path


@pytest.fixture
def serve(run_dir):
    """Serve ``run_dir`` in a thread; ``get(path, cookie)`` -> (status, headers, body)."""
    server = LiveServer(run_dir)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server.server_address[1]

    def get(path: str, cookie: str | None = None) -> tuple[int, http.client.HTTPMessage, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            conn.request("GET", path, headers={"Cookie": cookie} if cookie else {})
            resp = conn.getresponse()
            return resp.status, resp.headers, resp.read()
        finally:
            conn.close()

    get.server = server  # type: ignore[attr-defined]
    get.login = f"{server.cookie}={server.token}"  # type: ignore[attr-defined]
    try:
        yield get
    finally:
        server.shutdown()
        thread.join()


@pytest.mark.parametrize("token", ["%C3%A9", "%FF", "%E2%80%A8", "%ED%A0%80"])
def test_a_token_of_non_ascii_characters_is_refused(serve, token):
    """(hmac.compare_digest raised TypeError on a str with non-ASCII characters: a traceback, an empty reply.)"""
    status, _, body = serve(f"/?token={token}")
    assert status == 403, body
    status, _, body = serve("/", cookie=f"{serve.server.cookie}=\u00e9")
    assert status == 403, body


@pytest.mark.parametrize("tid", ["9" * 4301, "9" * 20, "9223372036854775808", "0" * 30 + "1"])
def test_a_trial_id_that_is_no_int64_is_not_found(serve, tid):
    """(int() of 4301 digits raised ValueError: a traceback and an empty reply.)"""
    status, _, body = serve(f"/trial/{tid}", cookie=serve.login)
    if tid.lstrip("0") == "1":
        assert status == 200, body  # (trial 1, written with leading zeros)
    else:
        assert (status, body) == (404, b"no such trial\n")


def test_two_servers_in_one_browser_keep_their_own_cookies(serve, run_dir):
    """(every `nas serve` named its cookie nas_serve_token: logging in to a second run overwrote the first's, whose
    next reload was refused.) A browser keeps cookies per host, not per port: both cookies are sent to both."""
    other = LiveServer(run_dir)
    thread = threading.Thread(target=other.serve_forever, daemon=True)
    thread.start()
    try:
        status, headers, _ = serve(f"/?token={serve.server.token}")
        assert status == 303
        first = headers["Set-Cookie"].split(";")[0]
        assert "Path=/" in headers["Set-Cookie"]
        conn = http.client.HTTPConnection("127.0.0.1", other.server.server_address[1], timeout=120)
        conn.request("GET", f"/?token={other.token}")
        second = conn.getresponse().headers["Set-Cookie"].split(";")[0]
        conn.close()
        assert first.split("=")[0] != second.split("=")[0]
        status, _, _ = serve("/trial/0", cookie=f"{first}; {second}")  # (the second login left the first's cookie)
        assert status == 200
    finally:
        other.shutdown()
        thread.join()


def _corrupt(run_dir, what: str) -> None:
    if what == "journal":
        with open(run_dir / "trials.jsonl", "a") as f:
            f.write('{"kind":"result",\n')  # (a whole line, not JSON: a torn last line has no newline)
    elif what == "removed":
        shutil.rmtree(run_dir)
    else:
        (run_dir / what).write_text("{garbage")


@pytest.mark.parametrize("what", ["journal", "run.json", "status.json"])
def test_a_run_it_cannot_read_is_refused_at_start(run_dir, capsys, what):
    """(nas serve started, then answered every page with an empty reply and a traceback on its stderr.)"""
    _corrupt(run_dir, what)
    assert main(["serve", str(run_dir)]) == 2
    out, err = capsys.readouterr()
    named = run_dir / ("trials.jsonl" if what == "journal" else what)
    assert not out and len(err.strip().splitlines()) == 1 and str(named) in err, err


@pytest.mark.parametrize(("what", "page"), [
    ("journal", "/"), ("run.json", "/"), ("status.json", "/"), ("removed", "/"),
    ("journal", "/trial/0"), ("run.json", "/trial/0"), ("removed", "/trial/0")])
def test_a_page_it_cannot_build_is_a_500_of_one_line(serve, run_dir, capfd, what, page):
    """The run's files made corrupt, or the run removed, while it is served: a 500 whose line says why (a trial's
    page reads no status.json)."""
    _corrupt(run_dir, what)
    status, headers, body = serve(page, cookie=serve.login)
    assert status == 500 and headers["Content-Type"].startswith("text/plain"), (status, body)
    text = body.decode()
    assert text.startswith("500: cannot build this page: ") and text.count("\n") == 1, text
    assert "Traceback" not in capfd.readouterr().err
