"""Database URLs and engines: SQLite (embedded, one broker) or PostgreSQL (several replicas).

The store picks the dialect from the URL. ``postgresql://`` and ``postgres://`` mean
psycopg 3 (SQLAlchemy's bare ``postgresql`` would mean psycopg2, which stoker does not
install). Everything else the store does is portable SQLAlchemy; what differs per dialect
lives here: SQLite's pragmas, and PostgreSQL's lock that keeps two replicas starting at
once from running the migrations together.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine, make_url

# advisory lock keys (PostgreSQL's 64-bit lock space is shared by the whole database;
# these are "stok" + a purpose, unlikely to meet another application's)
MIGRATION_LOCK = 0x73746F6B_00000001
LEADER_LOCK = 0x73746F6B_00000002
IDLE_IN_TRANSACTION_MS = 3000


def sqlite_url(path: Path | str) -> str:
    """The URL of an SQLite file."""
    return f"sqlite:///{path}"


def normalize_url(url: str) -> str:
    """``url`` with PostgreSQL's driver made explicit (psycopg 3); anything else as is."""
    u = make_url(url)
    if u.drivername in ("postgresql", "postgres"):
        u = u.set(drivername="postgresql+psycopg")
    return u.render_as_string(hide_password=False)


def display_url(url: str) -> str:
    """``url`` without its password, for logs and errors (an unreadable one is not shown:
    it might hold a password)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ValueError, sa.exc.ArgumentError):
        return "an unreadable URL"


def make_engine(url: str, **kw: Any) -> Engine:
    """An engine for ``url``; SQLite files get WAL and a busy timeout, PostgreSQL a pool
    that drops connections the server closed (a restarted server, a failover)."""
    url = normalize_url(url)
    if make_url(url).get_backend_name() == "sqlite":
        engine = sa.create_engine(url, **kw)
        sa.event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    # a replica frozen inside a transaction (a stopped process, a stalled host) holds the
    # fence's share lock on the leader row: the server ends such a transaction after this
    # long, so the next leader's epoch bump is never held up longer
    options = f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_MS}"
    return sa.create_engine(url, pool_pre_ping=True, connect_args={"options": options}, **kw)


def lock_migrations(conn: Connection) -> None:
    """Serialise migrations across replicas (PostgreSQL; SQLite has one broker per file).

    A transaction-scoped advisory lock: released when the migration's transaction ends.
    """
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK})


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    # WAL: readers never block the loop's writes; NORMAL sync is durable across a process
    # crash (the broker's failure mode) and costs no fsync per commit
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=5000")
    cur.close()
