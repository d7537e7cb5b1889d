"""The progress display, drawn on a real pseudo-terminal 80 columns wide and into a plain log."""

from __future__ import annotations

import fcntl
import io
import os
import re
import struct
import subprocess
import sys
import termios
import textwrap

import pytest

from nas.monitor.progress import BAR_FORMAT, FittingBar

# A child search whose first trial waits until the display's timer has redrawn twice during it: the
# redraw on a timer is what ends the trial, so a display that redraws only on submit/finish hangs it.
CHILD = textwrap.dedent("""
    import functools, sys, tempfile, threading
    import nas
    from nas.monitor.progress import SearchProgress
    from nas.search_spaces.toy import ToySpace, toy_score
    from nas.train.simple import scored

    ticks = threading.Semaphore(0)

    class Counted(SearchProgress):
        def _tick(self):
            bar = self.bar
            orig = bar.refresh
            def refresh(*a, **k):
                out = orig(*a, **k)
                if threading.current_thread().name == "nas-progress":
                    ticks.release()
                return out
            bar.refresh = refresh
            super()._tick()

    def slow_first(arch):
        if not getattr(slow_first, "done", False):
            slow_first.done = True
            for _ in range(2):
                if not ticks.acquire(timeout=120):
                    sys.exit("the display did not redraw on its timer during a trial")
        return toy_score(arch)

    nas.search(ToySpace(), strategy="evolution", budget=40, executor="inprocess", workers=1, seed=0,
               strategy_options={"population": 8, "sample_size": 3}, run_dir=tempfile.mkdtemp(),
               data=None, train=scored(slow_first),
               callbacks=[Counted(refresh=0.05)])
""")


def run_in_pty(code: str, columns: int = 80, rows: int = 24) -> tuple[int, str]:
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "xterm"}
    env.pop("LINES", None)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=slave, stdout=slave, stderr=slave, env=env,
                            start_new_session=True, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed its side
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=120), b"".join(chunks).decode("utf-8", "replace")


def test_terminal_display_redraws_in_place_on_a_timer_and_fits_80_columns():
    rc, out = run_in_pty(CHILD)
    assert rc == 0, out
    body = out.replace("\r\n", "\n")
    assert body.count("\n") == 1 and body.endswith("\n"), repr(out[-300:])  # one line, ended once
    draws = [d for d in re.split(r"\r", body.rstrip("\n")) if d.strip()]
    assert len(draws) > 2 * 40, len(draws)  # every submit and result, plus the timer's redraws
    for d in draws:
        assert len(d) <= 80, d
        assert re.match(r"^(\s*\d+%\|[ #]+\| )?\d+/40 \[\d\d:\d\d<[\d:?]+, .*(trial/s|s/trial)\], best ", d), d
    assert "40/40 [" in draws[-1] and "best -1.0000, busy 0/1, queued 0" in draws[-1]


@pytest.mark.parametrize("columns", [40, 60, 80, 120])
def test_a_line_never_exceeds_the_width(columns):
    long = "best 0.9876, busy 16/16, queued 12, failed 3"
    line = FittingBar.format_meter(17, 24, 3725.0, ncols=columns, bar_format=BAR_FORMAT, postfix=long, ascii=" #",
                                   unit="trial")
    assert 0 < len(line) < columns + (columns == 120)
    if columns == 120:
        assert "#" in line and long in line  # room enough: bar and all of the text
    if columns == 40:
        assert "|" not in line[:6]  # too narrow for a bar: text only


def test_plain_lines_in_a_log(tmp_path):

    import nas
    from nas.monitor.progress import SearchProgress
    from nas.search_spaces.toy import ToySpace, toy_score
    from nas.train.simple import scored

    log = io.StringIO()
    nas.search(ToySpace(), strategy="random", budget=20, executor="inprocess", workers=1, seed=0,
               run_dir=tmp_path / "r",
               data=None, train=scored(toy_score),
               callbacks=[SearchProgress(stream=log, log_interval=3600)])
    text = log.getvalue()
    assert "\r" not in text and "#" not in text
    lines = text.splitlines()
    assert [int(line.split("/")[0]) for line in lines] == list(range(0, 21, 2))  # each tenth, once
    assert all(re.match(r"^\d+/20 \[\d\d:\d\d<.*\], best .*, busy \d/1, queued 0, failed 0$", ln)
               for ln in lines), lines


def test_status_watch_redraws_in_place_on_a_terminal(tmp_path):
    """``nas status --watch`` on an 80-column pty: the block is redrawn over itself (cursor up, clear), and
    the watch ends when the run does (the test finishes the run after the third draw it sees)."""
    import json
    import select

    import nas
    from nas.run.store import STATUS as STATUS_FILE
    from nas.search_spaces.toy import ToySpace, toy_score
    from nas.train.simple import scored

    run = tmp_path / "run"
    nas.search(ToySpace(), strategy="random", budget=4, executor="inprocess", seed=0, run_dir=run,
               data=None, train=scored(toy_score))
    live = json.loads((run / STATUS_FILE).read_text())
    (run / STATUS_FILE).write_text(json.dumps({**live, "state": "running", "budget": 8, "pid": os.getpid(),
                                               "updated": live["updated"]}))
    from nas.run.lock import RunLock

    lock = RunLock(run).acquire()  # this process stands for the live search: it holds the run's lock
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "nas.cli", "status", str(run), "--watch", "0.05"],
                            stdin=slave, stdout=slave, stderr=slave, start_new_session=True, close_fds=True,
                            env={**os.environ, "COLUMNS": "80", "TERM": "xterm"})
    os.close(slave)
    out = b""
    finished = False
    while True:
        ready, _, _ = select.select([master], [], [], 300)  # a hang guard (a loaded machine starts slowly)
        assert ready, out.decode()[-500:]
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        out += data
        if not finished and out.count(b"\x1b[J") >= 3:
            (run / STATUS_FILE).write_text(json.dumps({**live, "state": "finished"}))
            lock.release()
            finished = True
    os.close(master)
    assert proc.wait(timeout=120) == 0
    text = out.decode().replace("\r\n", "\n")
    parts = re.split(r"\x1b\[(\d+)A\r\x1b\[J", text)  # block, lines moved up, block, ...
    blocks, ups = parts[0::2], [int(n) for n in parts[1::2]]
    assert blocks[0].startswith("\x1b[J") and len(blocks) >= 4, text
    blocks[0] = blocks[0][3:]
    assert ups == [b.count("\n") for b in blocks[:-1]]  # each redraw moves up over the block drawn before
    assert all(b.startswith("run ") for b in blocks)
    assert "state     running" in blocks[0] and "state     finished" in blocks[-1]
    assert all(len(line) < 80 for b in blocks for line in b.splitlines())
