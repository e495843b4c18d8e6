"""Which broker replica schedules: leader election with a fencing token.

On PostgreSQL every replica campaigns for a session-level advisory lock
(``pg_try_advisory_lock``) on a dedicated connection; the one that gets it is the leader
until that session ends. A leader process that dies (SIGKILL, OOM, a crashed host) loses
the lock as soon as the server sees the session end: at once for a killed process (the
kernel closes its socket), within the TCP keep-alive set on the session (about 8 s) for a
host that vanished. Why a lock and not a lease row: a lease must wait out its whole term
before another replica may take over, a lock is free the moment its holder is gone, and
the server, not the replicas' clocks, says who holds it.

A lock alone does not stop a leader that has not yet noticed it is deposed (a stalled
process, a partition) from writing. So every new leader also increments ``leader.epoch``
in the store, and every scheduling write (:class:`stoker.broker.store.Batch`) first reads
the epoch ``FOR SHARE`` and rolls back when it is not the writer's own: a fencing token.
The share lock orders the two: a deposed leader's write either commits before the new
leader's increment (and the new leader, which replays the store after it, sees it) or
fails. The leader also checks its lock session every ``poll_s`` and steps down when it
cannot confirm it within ``lease_s``.

The leader's row also carries its advertised URL, where the other replicas forward writes.
On SQLite there is one broker per file: it leads at once, with the same epoch and fence.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.pool import NullPool

from stoker.broker.db import LEADER_LOCK, make_engine
from stoker.broker.store import Deposed, Store, leader

log = logging.getLogger("stoker.broker.leader")

# server-side TCP keep-alive of the lock session: a leader host that vanishes without
# closing its socket loses the lock after idle + interval * count seconds
_KEEPALIVE = {"tcp_keepalives_idle": 5, "tcp_keepalives_interval": 1, "tcp_keepalives_count": 3}


@dataclass(frozen=True, slots=True)
class LeaderInfo:
    """The store's leader row: the epoch (fencing token), who holds it, where it listens."""

    epoch: int
    holder: str | None
    url: str | None
    since: float | None


def replica_id() -> str:
    """A name for this replica that no other replica (or later run of this one) shares."""
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"


def read_leader(conn: Connection) -> LeaderInfo:
    row = conn.execute(
        sa.select(leader.c.epoch, leader.c.holder, leader.c.url, leader.c.since).where(
            leader.c.id == 1
        )
    ).one()
    return LeaderInfo(int(row.epoch), row.holder, row.url, row.since)


class Leadership:
    """This replica's part in the election: :meth:`try_acquire`, :meth:`hold`, :meth:`release`.

    While leading, :attr:`epoch` is this replica's fencing token and the store's fence
    checks it on every scheduling write.
    """

    def __init__(
        self,
        store: Store,
        url: str,
        *,
        holder: str | None = None,
        poll_s: float = 0.25,
        lease_s: float = 2.0,
    ) -> None:
        self.store = store
        self.url = url
        self.holder = holder or replica_id()
        self.poll_s = poll_s
        self.lease_s = lease_s
        self.epoch: int | None = None
        self.shared = store.engine.dialect.name == "postgresql"
        self._conn: Connection | None = None
        self._lost = asyncio.Event()
        self._last_error: str | None = None

    @property
    def leading(self) -> bool:
        return self.epoch is not None and not self._lost.is_set()

    def current(self) -> LeaderInfo:
        """The leader as the store knows it (possibly a dead one not yet replaced)."""
        with self.store.engine.connect() as conn:
            return read_leader(conn)

    # ------------------------------------------------------------------ election

    async def try_acquire(self) -> bool:
        """Take the lead if no replica holds it; True when this replica now leads."""
        if self.leading:
            return True
        if self.shared:
            try:
                got = await asyncio.wait_for(asyncio.to_thread(self._try_lock), self.lease_s)
            except (TimeoutError, sa.exc.SQLAlchemyError) as exc:
                why = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
                if why != self._last_error:  # once per distinct failure, not every poll
                    log.warning("leader election: %s", why)
                    self._last_error = why
                self._drop_connection()
                return False
            self._last_error = None
            if not got:
                return False
        self.epoch = await asyncio.to_thread(self._claim)
        self._lost = asyncio.Event()
        self.store.fence = self._fence
        log.warning("leading as %s (epoch %d, %s)", self.holder, self.epoch, self.url)
        return True

    async def campaign(self) -> None:
        """Wait until this replica leads."""
        while not await self.try_acquire():
            await asyncio.sleep(self.poll_s)

    async def hold(self) -> None:
        """Return when this replica stops leading: its lock session is gone, it could not
        confirm it within ``lease_s``, or a write found a newer epoch."""
        if not self.shared:
            await self._lost.wait()  # one broker per SQLite file: only a fence failure
            return
        while self.leading:
            try:
                await asyncio.wait_for(asyncio.to_thread(self._confirm), self.lease_s)
            except (TimeoutError, sa.exc.SQLAlchemyError, Deposed) as exc:
                log.error("lost the lead (epoch %s): %s", self.epoch, exc)
                self._lost.set()
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._lost.wait(), self.poll_s)
        self._drop_connection()

    def release(self) -> None:
        """Give the lead up (a clean shutdown): the lock goes with the session."""
        self._lost.set()
        self._drop_connection()

    # ------------------------------------------------------------------ database side

    def _try_lock(self) -> bool:
        if self._conn is None:
            engine = make_engine(self.store.url, poolclass=NullPool)
            conn = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            for name, value in _KEEPALIVE.items():
                conn.execute(sa.text(f"SET {name} = {int(value)}"))
            self._conn = conn
        got = self._conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": LEADER_LOCK})
        return bool(got.scalar())

    def _claim(self) -> int:
        """Bump the epoch and name this replica, before anything of the store is read."""
        with self.store.transaction() as conn:
            conn.execute(
                leader.update()
                .where(leader.c.id == 1)
                .values(
                    epoch=leader.c.epoch + 1, holder=self.holder, url=self.url, since=time.time()
                )
            )
            return read_leader(conn).epoch

    def _confirm(self) -> None:
        assert self._conn is not None
        epoch = self._conn.execute(sa.select(leader.c.epoch).where(leader.c.id == 1)).scalar_one()
        if epoch != self.epoch:
            raise Deposed(f"epoch {self.epoch} superseded by {epoch}")

    def _fence(self, conn: Connection) -> None:
        epoch = conn.execute(
            sa.select(leader.c.epoch).where(leader.c.id == 1).with_for_update(read=True)
        ).scalar_one()
        if epoch != self.epoch or self._lost.is_set():
            self._lost.set()
            raise Deposed(f"not the leader: epoch {self.epoch}, the store's is {epoch}")

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            engine = conn.engine
            with contextlib.suppress(Exception):  # a dead session has nothing left to close
                conn.invalidate()
            engine.dispose()
