"""The broker's store: SQLAlchemy 2 behind one interface (SQLite WAL embedded by default,
PostgreSQL through psycopg 3 for several broker replicas; see :mod:`stoker.broker.db`).

What is stored is what a restarted broker (or a replica taking over) needs: tenants (token
hashes), jobs (the API's view: request, state, timeline, exit), job output, uploaded code
digests, the log of every event handed to the core, so a fresh core is rebuilt by replaying
it, and who leads (:mod:`stoker.broker.leader`). The schema is owned by the Alembic
migrations under ``stoker/broker/migrations``, run at open, the same on both dialects.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy.engine import Connection, Engine

from stoker.broker.db import lock_migrations, make_engine, sqlite_url

_META = sa.MetaData()
tenants = sa.Table(
    "tenants",
    _META,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("created", sa.Float, nullable=False),
    # deleted with its history kept: no token opens it, its name is not reused
    sa.Column("revoked", sa.Float),
)
# a rotated token's predecessor, valid until ``expires`` (the rotation's grace)
tenant_tokens = sa.Table(
    "tenant_tokens",
    _META,
    sa.Column("token_hash", sa.String(64), primary_key=True),
    sa.Column("tenant", sa.String(64), nullable=False),
    sa.Column("expires", sa.Float, nullable=False),
)
jobs = sa.Table(
    "jobs",
    _META,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("tenant", sa.String(64), nullable=False),
    sa.Column("idempotency_key", sa.String(200)),
    sa.Column("profile", sa.String(64), nullable=False),
    sa.Column("reuse_tag", sa.String(200), nullable=False),
    sa.Column("job_class", sa.String(8), nullable=False),
    sa.Column("workers", sa.Integer, nullable=False),
    sa.Column("gpus", sa.Float, nullable=False),
    sa.Column("guarantee_s", sa.Float),
    sa.Column("argv", sa.JSON, nullable=False),
    sa.Column("code_digest", sa.String(64)),
    sa.Column("deps", sa.JSON, nullable=False),
    sa.Column("env", sa.JSON, nullable=False),  # name -> sealed value (stoker.broker.secrets)
    sa.Column("secrets", sa.JSON, nullable=False),
    sa.Column("request_mac", sa.String(64)),
    sa.Column("timeout_s", sa.Float, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("path", sa.String(16)),
    sa.Column("pods", sa.JSON, nullable=False),
    sa.Column("submitted", sa.Float, nullable=False),
    # when the core placed the run that started (chose its pods): queue wait ends, start
    # latency begins
    sa.Column("placed", sa.Float),
    sa.Column("started", sa.Float),
    # a finished job's end, in steps: its process exited, its output was drained (the pod
    # clean again; both the agent's clock), the broker took it (finished), its final row's
    # transaction began (committed)
    sa.Column("exited", sa.Float),
    sa.Column("drained", sa.Float),
    sa.Column("finished", sa.Float),
    sa.Column("committed", sa.Float),
    sa.Column("exit_code", sa.Integer),
    sa.Column("failure", sa.String(32)),
    sa.Column("requeues", sa.Integer, nullable=False, default=0),
    sa.Column("requeue_reason", sa.String(32)),
    # a queued job's reason to wait (Core.waiting), as words; NULL for any other
    sa.Column("waiting_reason", sa.String(500)),
    sa.Column("guarantee_succeeded", sa.Integer, nullable=False, default=0),
    sa.Column("guarantee_failed", sa.Integer, nullable=False, default=0),
    sa.Column("labels", sa.JSON, nullable=False, default=dict),
)
job_output = sa.Table(
    "job_output",
    _META,
    sa.Column("job", sa.String(40), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("stream", sa.String(8), nullable=False),
    sa.Column("data", sa.LargeBinary, nullable=False),
)
core_events = sa.Table(
    "core_events",
    _META,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("at", sa.Float, nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("data", sa.JSON, nullable=False),
)
hp_demand = sa.Table(
    "hp_demand",
    _META,
    sa.Column("gpu_model", sa.String(64), primary_key=True),
    sa.Column("tenant", sa.String(64), primary_key=True),
    sa.Column("minute", sa.BigInteger, primary_key=True),
    sa.Column("gpus", sa.Float, nullable=False),
)
code = sa.Table(
    "code",
    _META,
    sa.Column("digest", sa.String(64), primary_key=True),
    sa.Column("size", sa.Integer, nullable=False),
    sa.Column("created", sa.Float, nullable=False),
)
leader = sa.Table(
    "leader",
    _META,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("epoch", sa.Integer, nullable=False),
    sa.Column("holder", sa.String(200)),
    sa.Column("url", sa.String(500)),
    sa.Column("since", sa.Float),
)
code_tenants = sa.Table(
    "code_tenants",
    _META,
    sa.Column("digest", sa.String(64), primary_key=True),
    sa.Column("tenant", sa.String(64), primary_key=True),
)
secrets = sa.Table(
    "secrets",
    _META,
    sa.Column("tenant", sa.String(64), primary_key=True),
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
    sa.Column("updated", sa.Float, nullable=False),
)


def _tombstone(name: str) -> str:
    """A revoked tenant's token hash: unique per name, never a token's (not hex)."""
    return "revoked:" + hashlib.sha256(name.encode()).hexdigest()[:56]


_MIGRATIONS = str(Path(__file__).resolve().parent / "migrations")
# columns of a job row the API shows (not the idempotency key and the request's digest)
JOB_FIELDS = tuple(c.name for c in jobs.columns if c.name not in ("idempotency_key", "request_mac"))


class StoreError(RuntimeError):
    """The store cannot do what was asked (a conflict, a missing row)."""


class Deposed(StoreError):
    """A scheduling write by a replica that no longer leads (the store's fence refused it:
    see stoker.broker.leader); nothing of it was written."""


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One core event as logged: when it was handed to the core, its kind and fields."""

    seq: int
    at: float
    kind: str
    data: dict[str, Any]


class Store:
    """All the broker's persistent state; one transaction per call, nothing half-written."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: Engine = make_engine(url)
        # run first in every scheduling write (Batch.commit): the leader's fencing check,
        # so a deposed leader's writes roll back (set by stoker.broker.leader)
        self.fence: Callable[[Connection], None] | None = None
        # SQLite: one connection kept for the scheduling loop's commits and reads (see
        # loop_transaction); None until first used, and after an error
        self._keep_loop_conn = self.engine.dialect.name == "sqlite"
        self._loop_conn: Connection | None = None
        with self.engine.begin() as conn:
            lock_migrations(conn)
            cfg = AlembicConfig()
            cfg.set_main_option("script_location", _MIGRATIONS)
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    @staticmethod
    def sqlite(path: Path | str) -> Store:
        """A store in an SQLite file (created with its parent directory if missing), readable
        by its owner only: it holds token hashes and every tenant's jobs."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        # SQLite makes the -wal and -shm files with the database's mode: create it 600 first
        os.close(os.open(p, os.O_WRONLY | os.O_CREAT, 0o600))
        for f in (p, p.with_name(p.name + "-wal"), p.with_name(p.name + "-shm")):
            with contextlib.suppress(FileNotFoundError):
                os.chmod(f, 0o600)
        return Store(sqlite_url(p))

    def close(self) -> None:
        conn, self._loop_conn = self._loop_conn, None
        if conn is not None:
            conn.close()
        self.engine.dispose()

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """One transaction: everything written inside lands together or not at all."""
        with self.engine.begin() as conn:
            yield conn

    @contextmanager
    def loop_transaction(self, write: bool = True) -> Iterator[Connection]:
        """A transaction of the scheduling loop (its group commit; with ``write`` False, a
        read, rolled back), called from the loop's thread only. On SQLite it runs on one
        connection kept for the loop, not a pool checkout (and the pool's reset) per loop
        turn: the checkout cost more than the turn's statements. The transaction ends on
        leaving, so the connection holds no read snapshot between turns (other readers see
        each commit at once); after an error it is rolled back and the connection replaced.
        Elsewhere: a pooled connection per call, as :meth:`transaction`."""
        if not self._keep_loop_conn:
            with self.engine.begin() if write else self.engine.connect() as conn:
                yield conn
            return
        conn = self._loop_conn
        if conn is None:
            conn = self._loop_conn = self.engine.connect()
        try:
            tx = conn.begin()
            yield conn
            if write:
                tx.commit()
            else:
                tx.rollback()
        except BaseException:
            self._loop_conn = None  # a connection in an unknown state is not kept
            with contextlib.suppress(Exception):
                conn.close()  # rolls back whatever is open
            raise

    # --- tenants -------------------------------------------------------------

    def add_tenant(self, name: str, token_hash: str) -> None:
        with self.transaction() as conn:
            row = conn.execute(sa.select(tenants.c.revoked).where(tenants.c.name == name)).first()
            if row is not None and row[0] is not None:
                raise StoreError(
                    f"name: tenant {name!r} was deleted and its job history kept; choose another"
                    " name, or purge that history first (DELETE /v1/tenants/NAME?purge=true)"
                )
            if row is not None:
                raise StoreError(f"name: tenant {name!r} exists already")
            conn.execute(
                tenants.insert().values(name=name, token_hash=token_hash, created=time.time())
            )

    def revoke_tenant(self, name: str, now: float, again: bool = False) -> list[str]:
        """Revoke a tenant in one transaction: no token of its opens anything from now on,
        its secrets and its claims on code archives are gone. Its job history stays (see
        :meth:`purge_tenant`). ``again``: a revoked tenant is no error (its history is to
        be purged). Returns the digests of archives no tenant claims any more (the caller
        removes their files)."""
        with self.transaction() as conn:
            row = conn.execute(sa.select(tenants.c.revoked).where(tenants.c.name == name)).first()
            if row is None or (row[0] is not None and not again):
                raise StoreError(f"name: no tenant {name!r}")
            conn.execute(tenant_tokens.delete().where(tenant_tokens.c.tenant == name))
            conn.execute(
                tenants.update()
                .where(tenants.c.name == name)
                # a value no token hashes to (hashes are 64 hex digits), unique per tenant
                .values(token_hash=_tombstone(name), revoked=row[0] or now)
            )
            conn.execute(secrets.delete().where(secrets.c.tenant == name))
            mine = [
                str(r[0])
                for r in conn.execute(
                    sa.select(code_tenants.c.digest).where(code_tenants.c.tenant == name)
                )
            ]
            conn.execute(code_tenants.delete().where(code_tenants.c.tenant == name))
            claimed = {
                str(r[0])
                for r in conn.execute(
                    sa.select(code_tenants.c.digest).where(code_tenants.c.digest.in_(mine))
                )
            }
            orphans = [d for d in mine if d not in claimed]
            if orphans:
                conn.execute(code.delete().where(code.c.digest.in_(orphans)))
        return orphans

    def purge_tenant(self, name: str) -> int:
        """Remove a revoked tenant's job history and its row (its name is free again);
        refused while it has unfinished jobs. Returns the jobs removed."""
        with self.transaction() as conn:
            row = conn.execute(sa.select(tenants.c.revoked).where(tenants.c.name == name)).first()
            if row is None:
                raise StoreError(f"name: no tenant {name!r}")
            if row[0] is None:
                raise StoreError(f"name: tenant {name!r} is not revoked")
            busy = conn.execute(
                sa.select(sa.func.count())
                .select_from(jobs)
                .where(jobs.c.tenant == name, jobs.c.state != "finished")
            ).scalar()
            if busy:
                raise StoreError(f"name: tenant {name!r} has {busy} unfinished jobs")
            ids = sa.select(jobs.c.id).where(jobs.c.tenant == name)
            conn.execute(job_output.delete().where(job_output.c.job.in_(ids)))
            removed = conn.execute(jobs.delete().where(jobs.c.tenant == name)).rowcount
            conn.execute(hp_demand.delete().where(hp_demand.c.tenant == name))
            conn.execute(tenants.delete().where(tenants.c.name == name))
        return int(removed)

    def rotate_token(self, name: str, token_hash: str, now: float, grace_s: float) -> None:
        """Give a tenant a new token; its current one stays valid ``grace_s`` more."""
        with self.transaction() as conn:
            row = conn.execute(
                sa.select(tenants.c.token_hash, tenants.c.revoked).where(tenants.c.name == name)
            ).first()
            if row is None or row[1] is not None:
                raise StoreError(f"name: no tenant {name!r}")
            conn.execute(tenant_tokens.delete().where(tenant_tokens.c.expires <= now))
            if grace_s > 0:
                conn.execute(
                    tenant_tokens.insert().values(
                        token_hash=row[0], tenant=name, expires=now + grace_s
                    )
                )
            conn.execute(
                tenants.update().where(tenants.c.name == name).values(token_hash=token_hash)
            )

    def tenant_by_hash(self, token_hash: str, now: float) -> str | None:
        """The live tenant a token's hash opens at ``now`` (its current token, or a rotated
        one still in its grace), else None."""
        current = sa.select(tenants.c.name).where(
            tenants.c.token_hash == token_hash, tenants.c.revoked.is_(None)
        )
        rotated = (
            sa.select(tenants.c.name)
            .join(tenant_tokens, tenant_tokens.c.tenant == tenants.c.name)
            .where(
                tenant_tokens.c.token_hash == token_hash,
                tenant_tokens.c.expires > now,
                tenants.c.revoked.is_(None),
            )
        )
        with self.engine.connect() as conn:
            row = conn.execute(current).first() or conn.execute(rotated).first()
        return None if row is None else str(row[0])

    def output_bytes(self) -> dict[str, int]:
        """Each tenant's stored output, in bytes."""
        q = (
            sa.select(jobs.c.tenant, sa.func.sum(sa.func.length(job_output.c.data)))
            .select_from(job_output.join(jobs, jobs.c.id == job_output.c.job))
            .group_by(jobs.c.tenant)
        )
        with self.engine.connect() as conn:
            return {str(t): int(n or 0) for t, n in conn.execute(q)}

    def prune(
        self, now: float, keep_s: float | None, keep_jobs: int | None, batch: int = 500
    ) -> dict[str, tuple[int, int]]:
        """Delete finished jobs (with their output) that ended before ``now - keep_s``, and
        each tenant's finished jobs beyond its newest ``keep_jobs``; never an unfinished
        one. One transaction per batch of ``batch`` jobs. Returns per tenant the jobs and
        output bytes deleted."""
        done = jobs.c.state == "finished"
        doomed: list[tuple[str, str]] = []
        with self.engine.connect() as conn:
            if keep_s is not None:
                q = sa.select(jobs.c.id, jobs.c.tenant).where(done, jobs.c.finished < now - keep_s)
                doomed += [(str(i), str(t)) for i, t in conn.execute(q)]
            if keep_jobs is not None:
                rank = (
                    sa.func.row_number()
                    .over(partition_by=jobs.c.tenant, order_by=(jobs.c.finished.desc(), jobs.c.id))
                    .label("rank")
                )
                ranked = sa.select(jobs.c.id, jobs.c.tenant, rank).where(done).subquery()
                q = sa.select(ranked.c.id, ranked.c.tenant).where(ranked.c.rank > keep_jobs)
                doomed += [(str(i), str(t)) for i, t in conn.execute(q)]
        out: dict[str, tuple[int, int]] = {}
        unique = list(dict.fromkeys(doomed))
        for start in range(0, len(unique), batch):
            part = unique[start : start + batch]
            ids = [i for i, _ in part]
            with self.transaction() as conn:
                sizes = dict(
                    conn.execute(
                        sa.select(job_output.c.job, sa.func.sum(sa.func.length(job_output.c.data)))
                        .where(job_output.c.job.in_(ids))
                        .group_by(job_output.c.job)
                    ).all()
                )
                conn.execute(job_output.delete().where(job_output.c.job.in_(ids)))
                # finished only, checked again inside the transaction
                conn.execute(jobs.delete().where(jobs.c.id.in_(ids), done))
            for job_id, tenant in part:
                n, size = out.get(tenant, (0, 0))
                out[tenant] = (n + 1, size + int(sizes.get(job_id) or 0))
        return out

    def tenant_jobs(self, name: str, unfinished: bool = True) -> list[str]:
        """A tenant's job ids (only the unfinished ones by default)."""
        q = sa.select(jobs.c.id).where(jobs.c.tenant == name)
        if unfinished:
            q = q.where(jobs.c.state != "finished")
        with self.engine.connect() as conn:
            return [str(r[0]) for r in conn.execute(q)]

    def tenant_names(self, revoked: bool = False) -> list[str]:
        """The live tenants' names (``revoked``: with those revoked whose history is kept)."""
        q = sa.select(tenants.c.name).order_by(tenants.c.name)
        if not revoked:
            q = q.where(tenants.c.revoked.is_(None))
        with self.engine.connect() as conn:
            return [str(r[0]) for r in conn.execute(q)]

    # --- jobs ----------------------------------------------------------------

    def job_by_key(self, tenant: str, key: str, loop: bool = False) -> dict[str, Any] | None:
        """The job ``tenant`` submitted under idempotency key ``key``; ``loop``: read on
        the scheduling loop's connection (:meth:`loop_transaction`)."""
        with self.loop_transaction(write=False) if loop else self.engine.connect() as conn:
            row = conn.execute(_JOB_BY_KEY, {"tenant": tenant, "key": key}).first()
        return None if row is None else dict(row._mapping)

    def get_job(self, job_id: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(_JOB_BY_ID, {"id": job_id}).first()
        return None if row is None else dict(row._mapping)

    def list_jobs(
        self,
        tenant: str | None,
        states: tuple[str, ...] = (),
        limit: int = 100,
        labels: dict[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """Newest first; only jobs carrying every ``labels`` key with that value."""
        q = sa.select(jobs).order_by(jobs.c.submitted.desc()).limit(limit)
        if tenant is not None:
            q = q.where(jobs.c.tenant == tenant)
        if states:
            q = q.where(jobs.c.state.in_(states))
        for key, value in (labels or {}).items():
            q = q.where(jobs.c.labels[key].as_string() == value)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(q)]

    def queued_counts(self) -> dict[str, int]:
        """How many jobs wait in each profile's queue (profiles with none are left out)."""
        q = (
            sa.select(jobs.c.profile, sa.func.count())
            .where(jobs.c.state == "queued")
            .group_by(jobs.c.profile)
        )
        with self.engine.connect() as conn:
            return {str(p): int(n) for p, n in conn.execute(q)}

    def unfinished_jobs(self) -> list[dict[str, Any]]:
        q = sa.select(jobs).where(jobs.c.state != "finished").order_by(jobs.c.submitted)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(q)]

    # --- output --------------------------------------------------------------

    def output(self, job_id: str, after: int = -1) -> list[tuple[int, str, bytes]]:
        with self.engine.connect() as conn:
            rows = conn.execute(_OUTPUT, {"job": job_id, "after": after})
            return [(int(s), str(st), bytes(d)) for s, st, d in rows]

    def last_output_seq(self, job_id: str) -> int:
        """The last output chunk's sequence number (-1 for none)."""
        q = sa.select(sa.func.max(job_output.c.seq)).where(job_output.c.job == job_id)
        with self.engine.connect() as conn:
            last = conn.execute(q).scalar()
        return -1 if last is None else int(last)

    # --- code ----------------------------------------------------------------

    def has_code(self, digest: str, tenant: str | None = None) -> bool:
        """Whether archive ``digest`` is stored (and, with ``tenant``, was uploaded by it:
        another tenant's archive is as absent)."""
        if tenant is None:
            q = sa.select(code.c.digest).where(code.c.digest == digest)
        else:
            q = sa.select(code_tenants.c.digest).where(
                code_tenants.c.digest == digest, code_tenants.c.tenant == tenant
            )
        with self.engine.connect() as conn:
            return conn.execute(q).first() is not None

    def add_code(self, digest: str, size: int, tenant: str) -> None:
        """Record archive ``digest`` as stored, and as ``tenant``'s. Concurrent uploads of
        one archive may both find it missing and insert: the one that loses finds it there
        when it tries again."""
        try:
            self._add_code(digest, size, tenant)
        except sa.exc.IntegrityError:
            self._add_code(digest, size, tenant)

    def _add_code(self, digest: str, size: int, tenant: str) -> None:
        with self.transaction() as conn:
            if (
                conn.execute(sa.select(code.c.digest).where(code.c.digest == digest)).first()
                is None
            ):
                conn.execute(code.insert().values(digest=digest, size=size, created=time.time()))
            owned = sa.select(code_tenants.c.digest).where(
                code_tenants.c.digest == digest, code_tenants.c.tenant == tenant
            )
            if conn.execute(owned).first() is None:
                conn.execute(code_tenants.insert().values(digest=digest, tenant=tenant))

    # --- secrets (values arrive sealed: see stoker.broker.secrets) --------------

    def set_secret(self, tenant: str, name: str, sealed: str) -> bool:
        """Set a secret; True if it is new."""
        key = (secrets.c.tenant == tenant) & (secrets.c.name == name)
        with self.transaction() as conn:
            if conn.execute(sa.select(secrets.c.name).where(key)).first() is None:
                conn.execute(
                    secrets.insert().values(
                        tenant=tenant, name=name, value=sealed, updated=time.time()
                    )
                )
                return True
            conn.execute(secrets.update().where(key).values(value=sealed, updated=time.time()))
            return False

    def secret_names(self, tenant: str) -> list[tuple[str, float]]:
        q = (
            sa.select(secrets.c.name, secrets.c.updated)
            .where(secrets.c.tenant == tenant)
            .order_by(secrets.c.name)
        )
        with self.engine.connect() as conn:
            return [(str(n), float(u)) for n, u in conn.execute(q)]

    def sealed_secrets(self, tenant: str, names: list[str]) -> dict[str, str]:
        """The sealed values of those of ``names`` the tenant has."""
        q = sa.select(secrets.c.name, secrets.c.value).where(
            secrets.c.tenant == tenant, secrets.c.name.in_(names)
        )
        with self.engine.connect() as conn:
            return {str(n): str(v) for n, v in conn.execute(q)}

    def reseal_secrets(self, reseal: Callable[[str], str]) -> int:
        """Every secret's value replaced by ``reseal(value)`` (a key rotation); how many.
        The ``updated`` time stays: the value did not change."""
        with self.transaction() as conn:
            q = sa.select(secrets.c.tenant, secrets.c.name, secrets.c.value)
            rows = conn.execute(q).all()
            for tenant, name, value in rows:
                key = (secrets.c.tenant == tenant) & (secrets.c.name == name)
                conn.execute(secrets.update().where(key).values(value=reseal(value)))
            return len(rows)

    def delete_secret(self, tenant: str, name: str) -> bool:
        """Delete a secret; False if there was none."""
        key = (secrets.c.tenant == tenant) & (secrets.c.name == name)
        with self.transaction() as conn:
            return conn.execute(secrets.delete().where(key)).rowcount > 0

    # --- the core's event log -------------------------------------------------

    def events(self) -> Iterator[StoredEvent]:
        """Every logged core event, in the order the core saw them."""
        with self.engine.connect() as conn:  # read all, then end the transaction: a long
            rows = conn.execute(sa.select(core_events).order_by(core_events.c.seq)).all()
        for seq, at, kind, data in rows:  # replay must not hold it open on the server
            yield StoredEvent(int(seq), float(at), str(kind), dict(data))

    # --- HP demand (what the forecaster is fitted on) ----------------------------

    def record_hp_demand(self, samples: list[tuple[str, str, int, float]]) -> None:
        """Store (gpu model, tenant, minute, peak GPUs) samples; a minute recorded twice
        keeps the larger peak (the broker samples a minute again after a restart)."""
        if not samples:
            return
        with self.transaction() as conn:
            if self.fence is not None:  # a deposed leader's meter is the new leader's now
                self.fence(conn)
            for model, tenant, minute, gpus in samples:
                key = (
                    (hp_demand.c.gpu_model == model)
                    & (hp_demand.c.tenant == tenant)
                    & (hp_demand.c.minute == minute)
                )
                old = conn.execute(sa.select(hp_demand.c.gpus).where(key)).scalar()
                if old is None:
                    conn.execute(
                        hp_demand.insert().values(
                            gpu_model=model, tenant=tenant, minute=minute, gpus=gpus
                        )
                    )
                elif gpus > old:
                    conn.execute(hp_demand.update().where(key).values(gpus=gpus))

    def last_hp_demand_minute(self) -> int:
        """The last minute with HP demand stored (-1 for none)."""
        with self.engine.connect() as conn:
            last = conn.execute(sa.select(sa.func.max(hp_demand.c.minute))).scalar()
        return -1 if last is None else int(last)

    def hp_demand(self, since_minute: int) -> list[tuple[str, str, int, float]]:
        """Every recorded (gpu model, tenant, minute, peak GPUs) from ``since_minute`` on."""
        q = (
            sa.select(
                hp_demand.c.gpu_model, hp_demand.c.tenant, hp_demand.c.minute, hp_demand.c.gpus
            )
            .where(hp_demand.c.minute >= since_minute)
            .order_by(hp_demand.c.minute)
        )
        with self.engine.connect() as conn:
            return [(str(m), str(t), int(mi), float(g)) for m, t, mi, g in conn.execute(q)]


# the hot path's statements, built once with bound parameters: SQLAlchemy then finds each
# compiled in its cache at once (building a statement anew per call, and its cache key,
# cost more than running it on SQLite)
_JOB_BY_ID = sa.select(jobs).where(jobs.c.id == sa.bindparam("id"))
_JOB_BY_KEY = sa.select(jobs).where(
    jobs.c.tenant == sa.bindparam("tenant"), jobs.c.idempotency_key == sa.bindparam("key")
)
_OUTPUT = (
    sa.select(job_output.c.seq, job_output.c.stream, job_output.c.data)
    .where(job_output.c.job == sa.bindparam("job"), job_output.c.seq > sa.bindparam("after"))
    .order_by(job_output.c.seq)
)
_INSERT_JOB = jobs.insert()
_INSERT_OUTPUT = job_output.insert()
_INSERT_EVENT = core_events.insert()


@functools.lru_cache(maxsize=64)
def _job_update(columns: tuple[str, ...]) -> sa.Update:
    """One UPDATE of ``columns`` by job id, with bound parameters: built once per column
    set, so SQLAlchemy compiles it once (a statement with literal values is compiled anew
    each time, which cost the loop's flush half its time)."""
    values = {c: sa.bindparam(c) for c in columns}
    return jobs.update().where(jobs.c.id == sa.bindparam("_id")).values(values)


class Batch:
    """Writes gathered while the loop handles one event, committed in one transaction."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.new_jobs: list[dict[str, Any]] = []
        self.job_updates: dict[str, dict[str, Any]] = {}
        self.output: list[dict[str, Any]] = []

    def __bool__(self) -> bool:
        return bool(self.events or self.new_jobs or self.job_updates or self.output)

    def event(self, at: float, kind: str, data: dict[str, Any]) -> None:
        self.events.append({"at": at, "kind": kind, "data": data})

    def update_job(self, job_id: str, **values: Any) -> None:
        self.job_updates.setdefault(job_id, {}).update(values)

    def commit(self, store: Store) -> None:
        """Write everything in one transaction: a submit's job row and its core event land
        together, so a restart never sees one without the other."""
        if not self:
            return
        # a job submitted in this batch is inserted as it is after the batch's updates (most
        # often its bind): one statement fewer per job
        updates = dict(self.job_updates)
        inserts = [{**row, **updates.pop(row["id"], {})} for row in self.new_jobs]
        with store.loop_transaction() as conn:
            if store.fence is not None:
                store.fence(conn)
            if inserts:
                conn.execute(_INSERT_JOB, inserts)
            by_columns: dict[tuple[str, ...], list[dict[str, Any]]] = {}
            for job_id, values in updates.items():
                by_columns.setdefault(tuple(sorted(values)), []).append({"_id": job_id, **values})
            for columns, rows in by_columns.items():
                conn.execute(_job_update(columns), rows)
            if self.output:
                conn.execute(_INSERT_OUTPUT, self.output)
            if self.events:
                conn.execute(_INSERT_EVENT, self.events)
        self.__init__()
