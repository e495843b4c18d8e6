"""Which broker replica schedules: leader election with a fencing token.

On PostgreSQL every replica campaigns for a session-level advisory lock
(``pg_try_advisory_lock``) on a dedicated connection; the one that gets it is the leader
until that session ends. Why a lock and not a lease row: a lease must wait out its whole
term before another replica may take over, a lock is free the moment its holder is gone,
and the server, not the replicas' clocks, says who holds it.

The leader keeps its lock session busy: a keeper thread (not the event loop, which a long
replay may block) re-reads the epoch on it every ``poll_s``. The server ends the session,
and frees the lock, when its holder is gone: at once for a killed process (the kernel
closes its socket), after ``idle_session_timeout`` (3 s) without a query for a frozen
process or a host that vanished (TCP keep-alive as a fallback). The leader itself stops
acting once it has not confirmed its lock for ``lease_s`` (2 s, less than the server's 3),
so a leader cut off stops before another may start.

A lock alone does not stop a leader that has not yet noticed it is deposed from writing.
So every new leader also increments ``leader.epoch`` in the store, and every scheduling
write (:class:`stoker.broker.store.Batch`) first reads the epoch ``FOR SHARE`` and rolls
back when it is not the writer's own: a fencing token. The share lock orders the two: a
deposed leader's write either commits before the new leader's increment (and the new
leader, which replays the store after it, sees it) or fails.

The leader's row also carries its advertised URL, where the other replicas forward writes.
On SQLite there is one broker per file: it leads at once, with the same epoch and fence.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.pool import NullPool

from stoker.broker.db import LEADER_LOCK, make_engine
from stoker.broker.store import Deposed, Store, leader

log = logging.getLogger("stoker.broker.leader")

# server-side settings of the lock session: it ends after this long without a query (the
# keeper sends one every poll_s), or when TCP keep-alive finds the peer gone
_SESSION = {
    "idle_session_timeout": 3000,  # ms; PostgreSQL 14 and later
    "tcp_keepalives_idle": 2,
    "tcp_keepalives_interval": 1,
    "tcp_keepalives_count": 2,
}


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
        # the fence's read, run before every scheduling write: plain text, so SQLAlchemy
        # neither builds it nor works out its cache key each time (half a commit's cost
        # on SQLite); FOR SHARE where the dialect has row locks
        self._epoch_query = sa.text(
            "SELECT epoch FROM leader WHERE id = 1" + (" FOR SHARE" if self.shared else "")
        )
        self._conn: Connection | None = None
        self._lost = asyncio.Event()
        self._dead = False  # the keeper or the fence found the lead lost (any thread)
        self._confirmed_at = 0.0  # monotonic time of the last query the lock session answered
        self._keeper_stop = threading.Event()
        self._last_error: str | None = None

    @property
    def leading(self) -> bool:
        """This replica holds the lead now: elected, not deposed, and (on PostgreSQL) its
        lock confirmed within ``lease_s``."""
        if self.epoch is None or self._dead or self._lost.is_set():
            return False
        return not self.shared or time.monotonic() - self._confirmed_at < self.lease_s

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
            asked = time.monotonic()
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
            self._confirmed_at = asked
        self.epoch = None  # until the claim below: an old epoch would confuse the keeper
        self._dead = False
        self._lost = asyncio.Event()
        if self.shared:  # keep the lock session busy from now on, the claim included
            self._keeper_stop = threading.Event()
            threading.Thread(
                target=self._keep,
                args=(self._conn, self._keeper_stop, asyncio.get_running_loop()),
                name="stoker-leader-keeper",
                daemon=True,
            ).start()
        self.epoch = await asyncio.to_thread(self._claim)
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
        while self.leading:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._lost.wait(), self.poll_s)
        if not self._lost.is_set():
            log.error("lost the lead (epoch %s): not confirmed for %s s", self.epoch, self.lease_s)
        self.release()

    def release(self) -> None:
        """Give the lead up (also a clean shutdown): the lock goes with the session."""
        self._lost.set()
        self._dead = True
        self._keeper_stop.set()
        self._drop_connection()

    # ------------------------------------------------------------------ database side

    def _try_lock(self) -> bool:
        if self._conn is None:
            engine = make_engine(self.store.url, poolclass=NullPool)
            conn = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            for name, value in _SESSION.items():
                if name == "idle_session_timeout" and conn.dialect.server_version_info < (14,):
                    continue  # older servers: TCP keep-alive alone finds a vanished leader
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

    def _keep(
        self, conn: Connection, stop: threading.Event, loop: asyncio.AbstractEventLoop
    ) -> None:
        """The keeper thread: confirm the lead on the lock session every ``poll_s`` until
        told to stop or the confirmation fails (then the lead is lost)."""
        while not stop.wait(self.poll_s):
            asked = time.monotonic()
            try:
                found = conn.execute(sa.select(leader.c.epoch).where(leader.c.id == 1)).scalar_one()
                self._confirm(found)
            except Exception as exc:  # a dead session, a newer epoch: the lead is gone
                if not stop.is_set():
                    log.error("lost the lead (epoch %s): %s", self.epoch, exc)
                    self._dead = True
                    with contextlib.suppress(RuntimeError):  # the loop may be closed
                        loop.call_soon_threadsafe(self._lost.set)
                return
            self._confirmed_at = asked

    def _confirm(self, found: int) -> None:
        """Check the store's epoch (``None`` while the claim is under way: nothing yet)."""
        if self.epoch is not None and found != self.epoch:
            raise Deposed(f"epoch {self.epoch} superseded by {found}")

    def _fence(self, conn: Connection) -> None:
        epoch = conn.execute(self._epoch_query).scalar_one()
        if epoch != self.epoch or not self.leading:
            self._dead = True
            self._lost.set()
            raise Deposed(f"not the leader: epoch {self.epoch}, the store's is {epoch}")

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            engine = conn.engine
            with contextlib.suppress(Exception):  # a dead session has nothing left to close
                conn.invalidate()
            engine.dispose()
