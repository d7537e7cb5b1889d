"""Run a command and print each line it writes (stdout and stderr, ``\\r`` redraws too) with the seconds since
start: how the docs time "the first line after Enter". (moreutils' ``ts -s`` does the same where it is installed;
this needs nothing but Python.)

    python scripts/stamp_lines.py nas search --strategy evoluton
"""

from __future__ import annotations

import subprocess
import sys
import time


def main(argv: list[str]) -> int:
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=0)
    assert proc.stdout is not None
    line = b""
    while chunk := proc.stdout.read(1):
        line += chunk
        if chunk in b"\r\n":
            if line.strip():
                print(f"[{time.monotonic() - start:6.2f}] {line.decode(errors='replace').rstrip()}", flush=True)
            line = b""
    if line.strip():
        print(f"[{time.monotonic() - start:6.2f}] {line.decode(errors='replace').rstrip()}")
    code = proc.wait()
    print(f"[{time.monotonic() - start:6.2f}] exit status {code}")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
