"""A private PostgreSQL server on this host (initdb + pg_ctl) for tests and benchmarks.

It lives in a fresh temporary data directory, listens on 127.0.0.1 on a free port only
(its Unix socket inside the data directory), trusts local connections, and is stopped and
removed by :meth:`PgServer.stop`, or by its watchdog when its owner dies without stopping it
(killed, or a test run cut short). As root it runs as the ``postgres`` user, as PostgreSQL
refuses to run as root. The binaries come from Debian's ``postgresql`` package
(``/usr/lib/postgresql/<version>/bin``) or from ``PATH``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from stoker.broker.embedded import free_port


class PostgresMissing(RuntimeError):
    """No PostgreSQL server binaries on this host."""


def find_bindir() -> Path:
    """The directory with ``initdb`` and ``pg_ctl`` (the newest Debian version first)."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    raise PostgresMissing(
        "PostgreSQL server binaries (initdb, pg_ctl) not found: install the Debian package"
        " 'postgresql' (scripts/bootstrap.sh does)"
    )


class PgServer:
    """One private server; :meth:`start`, then :meth:`create_database` per user of it."""

    def __init__(self) -> None:
        self.bindir = find_bindir()
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="stoker-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        # PostgreSQL will not run as root: drop to its own user
        self._user = "postgres" if os.geteuid() == 0 else None
        self.running = False
        self._watchdog: subprocess.Popen[bytes] | None = None

    def _run(self, *argv: str) -> None:
        proc = _pg(self.bindir, self._user, self.root, *argv)
        if proc.returncode != 0:
            log = self.log.read_text()[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{argv[0]} failed: {proc.stderr.strip()}\n{log}")

    def start(self) -> PgServer:
        """initdb and pg_ctl start; on any failure nothing is left (no server, no dir)."""
        try:
            self._start()
        except BaseException:
            with contextlib.suppress(Exception):  # the first error is the one to see
                self.stop()
            raise
        return self

    def _start(self) -> None:
        if self._user is not None:
            try:
                pw = pwd.getpwnam(self._user)
            except KeyError:
                raise PostgresMissing(
                    "no 'postgres' user to run the server as (Debian's 'postgresql' package"
                    " creates it)"
                ) from None
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        # The watchdog holds the read end of a pipe only this process writes to: when this
        # process ends, however it ends, the pipe closes and the watchdog stops the server
        # and removes its directory. Started before initdb, so an owner killed while the
        # cluster is being made leaves nothing either. Its own session keeps a terminal's
        # Ctrl-C off it.
        self._watchdog = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "stoker.broker.pgserver",
                "--watch",
                str(self.bindir),
                self._user or "",
                str(self.root),
            ],
            stdin=subprocess.PIPE,
            start_new_session=True,
        )
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        opts = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off"
        self.running = True  # from here on stop() tries pg_ctl stop
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", opts, "-w", "start")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; returns its URL."""
        import sqlalchemy as sa

        name = name or "stoker_" + uuid.uuid4().hex[:12]
        engine = sa.create_engine(
            self.url().replace("postgresql://", "postgresql+psycopg://"),
            isolation_level="AUTOCOMMIT",
        )
        with engine.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        engine.dispose()
        return self.url(name)

    def stop(self) -> None:
        """Stop the server (fast: open sessions are ended) and remove its directory."""
        try:
            if self.running:
                self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
                self.running = False
        finally:
            if self._watchdog is not None:  # it finds the server stopped, and leaves
                assert self._watchdog.stdin is not None
                self._watchdog.stdin.close()
                self._watchdog.wait(timeout=120)
                self._watchdog = None
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PgServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _pg(bindir: Path, user: str | None, root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run one of the server's programs (as its user) and return how it went."""
    return subprocess.run(
        [str(bindir / argv[0]), *argv[1:]],
        user=user,
        capture_output=True,
        text=True,
        cwd=root,
        timeout=120,
    )


def _watch(bindir: Path, user: str | None, root: Path) -> None:
    """Wait for the owner's end (EOF on stdin), then :func:`remove` what it left."""
    sys.stdin.buffer.read()
    remove(bindir, user, root)


def remove(bindir: Path, user: str | None, root: Path) -> None:
    """Stop the server under ``root`` if it still runs (immediate: nobody is left to finish
    with it) and remove the directory."""
    data = root / "data"
    if (data / "postmaster.pid").exists():
        _pg(bindir, user, root, "pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) != 5 or sys.argv[1] != "--watch":
        sys.exit("usage: python -m stoker.broker.pgserver --watch BINDIR USER ROOT")
    _watch(Path(sys.argv[2]), sys.argv[3] or None, Path(sys.argv[4]))
