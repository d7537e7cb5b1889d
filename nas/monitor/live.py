"""``nas serve RUN_DIR``: the report as a live page while the run goes, on 127.0.0.1 only.

The server is the standard library's :class:`http.server.ThreadingHTTPServer` (one small page per request; no
framework needed). It binds 127.0.0.1, never another address, and answers only a request that carries its
token: the printed URL with its secret token (``/?token=...``; it works as long as the server runs, so keep it to
yourself) sets it as a cookie named after the server's port (HttpOnly, SameSite=Strict, Path=/: two servers in one
browser keep their own) and redirects to the plain URL; any other request without it gets 403. Pages:

- ``/``: what is running now (trial, architecture, epoch, last report, worker: from the journal's submissions
  and reports without a result yet), then the report's views (:func:`nas.monitor.page.report_html`), reloaded
  every ``refresh`` seconds; rebuilt only when the journal or ``status.json`` changed, and no more often than
  twice the time the last build took (a 200,000-trial run's took 50 s: rebuilt on every change, its page could
  never be current and each reload cost a build), the page saying when it was built;
- ``/trial/<id>``: one trial: its learning curve, its architecture's picture (registered spaces), its costs and
  metrics, its parent (a link), its error (the run's trials read once per change of its files, not per page);
- ``/plotly.js``: plotly's JavaScript from the installed package (the pages work offline).

A run it cannot read (run.json, status.json or the journal corrupt) is refused at start; a page it cannot build
later (the run's files made corrupt or removed while it serves) is a 500 whose one line of text says why.

Nothing read from the run directory runs code (the journal is JSON; user spaces are never imported).
"""

from __future__ import annotations

import contextlib
import hmac
import html
import json
import os
import re
import secrets
import sys
import threading
import time
from collections.abc import Callable
from http import cookies
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pandas as pd

from nas.run.files import os_error_text

HOST = "127.0.0.1"
COOKIE = "nas_serve_token"  # (the prefix: each server's cookie is named after its port, see LiveServer.cookie)


def running_now(run_dir: str | os.PathLike[str]) -> pd.DataFrame:
    """The trials submitted and not finished, with their last report: trial, state (running once it reported an
    epoch; queued before: the journal records no start), epoch, metrics, worker, parent, arch."""
    from nas.run.journal import read_records

    rows: dict[int, dict[str, Any]] = {}
    for rec in read_records(Path(run_dir) / "trials.jsonl"):
        tid = rec.trial.trial_id
        if rec.kind == "submit":
            rows[tid] = {"trial": tid, "state": "queued", "epoch": 0, "last report": "", "worker": "",
                         "parent": rec.trial.parent, "arch": json.dumps(dict(rec.trial.arch), sort_keys=True)}
        elif rec.kind == "report" and rec.report is not None and tid in rows:
            metrics = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                for k, v in list(rec.report.metrics.items())[:4])
            rows[tid].update(state="running", epoch=rec.report.epoch, worker=rec.report.worker or "",
                             **{"last report": metrics})
        elif rec.kind == "result":
            rows.pop(tid, None)
    return pd.DataFrame(list(rows.values()),
                        columns=["trial", "state", "epoch", "last report", "worker", "parent", "arch"])


def _stamp(run_dir: Path) -> tuple[Any, ...]:
    out: list[Any] = []
    for name in ("trials.jsonl", "status.json"):
        try:
            st = (run_dir / name).stat()
            out += [st.st_mtime_ns, st.st_size]
        except OSError:
            out += [None, None]
    return tuple(out)


class LivePages:
    """The pages of one run, rebuilt when its files change."""

    def __init__(self, run_dir: str | os.PathLike[str], refresh: float = 5.0, top: int = 10,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.run_dir = Path(run_dir)
        self.refresh, self.top, self.clock = refresh, top, clock
        self._lock = threading.Lock()
        self._cached: tuple[tuple[Any, ...], str] | None = None
        self._built_at = self._build_seconds = 0.0
        self._frame: tuple[tuple[Any, ...], Any, pd.DataFrame] | None = None  # (stamp, config, trials)

    def index(self) -> str:
        stamp = _stamp(self.run_dir)
        with self._lock:
            stale = self._cached is not None and self._cached[0] != stamp
            if self._cached is None or stale and self.clock() - self._built_at >= 2 * self._build_seconds:
                t0 = self.clock()
                page = self._index()
                self._built_at = self.clock()
                self._build_seconds = self._built_at - t0
                self._cached = (stamp, page)
            return self._cached[1]

    def _index(self) -> str:
        from nas.monitor.page import STYLE, NothingToReport, _table, report_html

        head = f"<meta http-equiv='refresh' content='{int(self.refresh)}'>"
        now = running_now(self.run_dir)
        now_html = _table(now, "running-now") if len(now) else "<p class='note'>no trial running</p>"
        counts = now.state.value_counts().to_dict() if len(now) else {}
        built = time.strftime("%H:%M:%S")
        before = (f"<p class='note'>page of {built}</p>"
                  f"<h2 id='running-now-title'>Running now: {counts.get('running', 0)} running, "
                  f"{counts.get('queued', 0)} queued</h2>{now_html}"
                  f"<p class='note'>A page per trial: <a href='trial/ID'>trial/ID</a>"
                  + (", e.g. " + " ".join(f"<a href='trial/{t}'>{t}</a>" for t in now.trial.head(10)) if len(now)
                     else "") + "</p>")  # (with none running, "e.g." was left dangling)
        try:
            page = report_html([self.run_dir], self.top, plotlyjs="plotly.js", head=head, before=before)
        except NothingToReport as e:
            page = (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>{head}<title>NAS live: "
                    f"{html.escape(self.run_dir.name)}</title><style>{STYLE}</style></head><body><h1>NAS live: "
                    f"{html.escape(self.run_dir.name)}</h1>{before}<p class='note'>{html.escape(str(e))}</p>"
                    "</body></html>")
        return page

    def trial(self, trial_id: int) -> str | None:
        from nas.monitor import archdraw
        from nas.monitor.page import SCRIPT, STYLE, _fig
        from nas.run.reader import load_run

        stamp = _stamp(self.run_dir)
        with self._lock:
            if self._frame is None or self._frame[0] != stamp:
                self._frame = (stamp, *load_run(self.run_dir))
            _, cfg, df = self._frame
        rows = df[df.trial_id == trial_id]
        if rows.empty:
            now = running_now(self.run_dir)
            if trial_id not in set(now.trial):
                return None
            r = now[now.trial == trial_id].iloc[0]
            body = (f"<p>running: epoch {r.epoch}, {html.escape(str(r['last report']))} on "
                    f"{html.escape(str(r.worker))}</p><pre>{html.escape(str(r.arch))}</pre>")
            return self._page(f"trial {trial_id}", body, STYLE, SCRIPT)
        row = rows.iloc[-1]
        curve = self._curve(row)
        picture = archdraw.Drawer(cfg).figure(str(row.arch), f"trial {trial_id}")
        parent = (f"<a href='{int(row.parent)}'>trial {int(row.parent)}</a>" if pd.notna(row.parent) else "none")
        metrics = row.metrics if isinstance(row.metrics, dict) else {}
        table = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>"
                        for k, v in metrics.items())
        from nas.monitor.tables import objective_values

        values = objective_values(rows.tail(1), cfg.search.objectives).iloc[0]  # (each in its own units)
        named = ", ".join(f"{m} {'-' if pd.isna(v) else f'{v:.4g}'}" for m, v in values.items())
        body = (f"<p>{html.escape(str(row.state))} ({html.escape(str(row.outcome))}), {html.escape(named)}, "
                f"{row.epochs} epochs, worker "
                f"{html.escape(str(row.worker))}; parent {parent}. <a href='../'>back to the run</a></p>"
                f"<pre class='arch'>{html.escape(str(row.arch))}</pre>"
                + _fig(curve, "curve", "no per-epoch history recorded")
                + _fig(picture, "arch", "no picture of this space's architectures")
                + f"<h3>Costs and metrics</h3><table>{table}</table>"
                + (f"<h3>Error</h3><pre>{html.escape(str(row.error))}</pre>" if isinstance(row.error, str) else ""))
        return self._page(f"trial {trial_id}", body, STYLE, SCRIPT)

    @staticmethod
    def _curve(row: Any) -> Any:
        import plotly.graph_objects as go

        from nas.monitor.figures import literal  # (a metric's name from the run: shown as it is)

        history = row.history if isinstance(row.history, list) else []
        if not history:
            return None
        frame = pd.DataFrame(history)
        fig = go.Figure()
        x = frame["epoch"] if "epoch" in frame else list(range(1, len(frame) + 1))
        for col in frame.columns:
            if col != "epoch" and pd.api.types.is_numeric_dtype(frame[col]):
                fig.add_scatter(x=x, y=frame[col], mode="lines+markers", name=literal(col))
        fig.update_layout(title="learning curve", xaxis_title="epoch", template="plotly_white", height=340)
        return fig

    def _page(self, title: str, body: str, style: str, script: str) -> str:
        return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                f"<style>{style}</style><script>{script}</script><script src='../plotly.js'></script></head>"
                f"<body><h1>{html.escape(title)}</h1><div id='js-errors'></div>{body}</body></html>")


class LiveServer:
    """Serves :class:`LivePages` on 127.0.0.1:``port`` (0: a free one) behind ``token`` (default: a new random
    one). ``url`` is the URL to open (it carries the secret token and sets it as the cookie :attr:`cookie`);
    :meth:`serve_forever` / :meth:`shutdown` as the stdlib server."""

    def __init__(self, run_dir: str | os.PathLike[str], port: int = 0, *, token: str | None = None,
                 refresh: float = 5.0) -> None:
        from nas.run.reader import load_run
        from nas.run.schema import read_status

        load_run(run_dir)  # (a run it cannot read is refused now, in one line naming the file, not page by page)
        read_status(run_dir)
        running_now(run_dir)
        self.pages = LivePages(run_dir, refresh)
        self.token = token or secrets.token_urlsafe(24)
        try:
            self.server = ThreadingHTTPServer((HOST, port), self._handler())
        except OSError as e:  # (a port in use, or below 1024 without the right)
            hint = "; leave --port out for a free one" if port else ""
            raise ValueError(f"cannot serve on {HOST}:{port}: {os_error_text(e)}{hint}") from None
        self.server.daemon_threads = True

    @property
    def cookie(self) -> str:
        """The name of this server's cookie: a second ``nas serve`` on another port, in the same browser, keeps its
        own (cookies are per host, not per port)."""
        return f"{COOKIE}_{self.server.server_address[1]}"

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.server.server_address[1]}/?token={self.token}"

    def serve_forever(self) -> None:
        self.server.serve_forever()

    def shutdown(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # (quiet: the terminal shows the URL)
                return

            def _send(self, code: int, body: bytes, ctype: str = "text/html; charset=utf-8",
                      headers: dict[str, str] | None = None) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store" if ctype.startswith("text/html") else "max-age=3600")
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                url = urlparse(self.path)
                given = parse_qs(url.query).get("token", [""])[0]
                if given and _same(given, server.token):
                    cookie = f"{server.cookie}={server.token}; HttpOnly; SameSite=Strict; Path=/"
                    self._send(303, b"", headers={"Location": url.path or "/", "Set-Cookie": cookie})
                    return
                try:
                    jar = cookies.SimpleCookie(self.headers.get("Cookie", ""))
                except cookies.CookieError:
                    jar = cookies.SimpleCookie()
                held = jar[server.cookie].value if server.cookie in jar else ""
                if not _same(held, server.token):
                    self._send(403, b"403: open the URL that nas serve printed (it carries the token)\n",
                               "text/plain; charset=utf-8")
                    return
                try:
                    self._route(url.path)
                except (BrokenPipeError, ConnectionResetError):
                    return
                except Exception as e:  # (the run's files changed under the server: one line, never a dropped reply)
                    said = " ".join(str(e).split()) or type(e).__name__
                    print(f"nas serve: cannot build {url.path}: {said}", file=sys.stderr, flush=True)
                    with contextlib.suppress(OSError):
                        self._send(500, f"500: cannot build this page: {said}\n".encode("utf-8", "backslashreplace"),
                                   "text/plain; charset=utf-8")

            def _route(self, path: str) -> None:
                if path.endswith("/plotly.js"):
                    from plotly.offline import get_plotlyjs

                    self._send(200, get_plotlyjs().encode(), "application/javascript")
                elif path == "/":
                    self._send(200, server.pages.index().encode())
                elif m := re.fullmatch(r"/trial/([0-9]+)", path):
                    digits = m.group(1).lstrip("0") or "0"  # (a trial id is an int64: a longer one is none)
                    page = server.pages.trial(int(digits)) if len(digits) <= 19 and int(digits) < 2**63 else None
                    if page is None:
                        self._send(404, b"no such trial\n", "text/plain; charset=utf-8")
                    else:
                        self._send(200, page.encode())
                else:
                    self._send(404, b"not found\n", "text/plain; charset=utf-8")

        return Handler


def _same(given: str, token: str) -> bool:
    """Whether ``given`` is the token, in constant time; any text (hmac compares no str with non-ASCII characters:
    the bytes are compared)."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), token.encode("utf-8"))


__all__ = ["LivePages", "LiveServer", "running_now"]
