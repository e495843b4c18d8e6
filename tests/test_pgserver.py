"""The private PostgreSQL server the tests and benchmarks start: nothing of it outlives
its owner, however the owner ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("psycopg")

OWNER = """
import json, sys, time
from stoker.broker.pgserver import PgServer, PostgresMissing
try:
    server = PgServer().start()
except PostgresMissing as exc:
    print(json.dumps({"missing": str(exc)}), flush=True)
    sys.exit(0)
with open(server.data / "postmaster.pid") as f:
    pid = int(f.readline())
print(json.dumps({"root": str(server.root), "pid": pid}), flush=True)
time.sleep(600)
"""


def _missing(why: str) -> None:
    """Skip without the server binaries, except in CI, where bootstrap installs them."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI: {why}", pytrace=False)
    pytest.skip(why)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purpose (its parent, the init process, reaps it)
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


def test_a_killed_owner_leaves_no_server_and_no_directory() -> None:
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True)
    root: Path | None = None
    try:
        assert owner.stdout is not None
        info = json.loads(owner.stdout.readline())
        if "missing" in info:
            _missing(info["missing"])
        root, pid = Path(info["root"]), info["pid"]
        assert _alive(pid) and root.exists()
        owner.send_signal(signal.SIGKILL)  # no finally, no atexit: only the watchdog acts
        owner.wait(timeout=30)
        deadline = time.monotonic() + 60
        while (_alive(pid) or root.exists()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(pid), "the server outlived its killed owner"
        assert not root.exists(), "the server's directory outlived its killed owner"
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        if root is not None and root.exists():  # the test failed: clean up after it
            from stoker.broker.pgserver import find_bindir, remove

            remove(find_bindir(), "postgres" if os.geteuid() == 0 else None, root)


def test_a_stopped_server_leaves_no_watchdog() -> None:
    from stoker.broker.pgserver import PgServer, PostgresMissing

    try:
        server = PgServer().start()
    except PostgresMissing as exc:
        _missing(str(exc))
    watchdog = server._watchdog
    assert watchdog is not None and watchdog.poll() is None
    server.stop()
    assert watchdog.poll() is not None, "the watchdog outlived a clean stop"
    assert not server.root.exists()


# initdb here stands in for PostgreSQL's own (not ours): it marks that it runs, with its
# pid, and waits, so the owner can be killed while the cluster is being made
SLOW_INITDB = """#!/bin/sh
echo $$ > initdb-running
exec sleep 120
"""

OWNER_IN_INITDB = """
import sys
from pathlib import Path
from stoker.broker.pgserver import PgServer
server = PgServer()
server.bindir = Path(sys.argv[1])
print(server.root, flush=True)
server.start()
"""


def test_an_owner_killed_during_initdb_leaves_no_directory() -> None:
    import shutil
    import tempfile

    from stoker.broker.pgserver import PostgresMissing, find_bindir

    try:
        find_bindir()
    except PostgresMissing as exc:
        _missing(str(exc))
    bindir = Path(tempfile.mkdtemp(prefix="stoker-test-initdb-"))
    bindir.chmod(0o755)  # the server's user runs it
    (bindir / "initdb").write_text(SLOW_INITDB)
    (bindir / "initdb").chmod(0o755)
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER_IN_INITDB, str(bindir)], stdout=subprocess.PIPE, text=True
    )
    initdb: int | None = None
    root: Path | None = None
    try:
        assert owner.stdout is not None
        root = Path(owner.stdout.readline().strip())
        mark = root / "initdb-running"
        deadline = time.monotonic() + 60
        while not (mark.exists() and mark.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.1)
        initdb = int(mark.read_text())
        owner.send_signal(signal.SIGKILL)  # no finally, no atexit: only the watchdog acts
        owner.wait(timeout=30)
        deadline = time.monotonic() + 60
        while root.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not root.exists(), "a server directory outlived an owner killed in initdb"
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        if initdb is not None and _alive(initdb):
            os.kill(initdb, signal.SIGKILL)
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(bindir, ignore_errors=True)
