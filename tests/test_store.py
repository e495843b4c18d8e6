"""The store on both dialects: a real SQLite file and a real PostgreSQL server (same Alembic
migrations, same behaviour)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from stoker.broker.auth import write_keys
from stoker.broker.config import BrokerConfig
from stoker.broker.db import normalize_url
from stoker.broker.embedded import free_port
from stoker.broker.store import Batch, Store, StoreError, jobs
from stoker.cli.main import app


def _job(job_id: str, tenant: str = "a", key: str | None = None, **kw: Any) -> dict[str, Any]:
    row = {
        "id": job_id,
        "tenant": tenant,
        "idempotency_key": key,
        "profile": "plain",
        "reuse_tag": "x",
        "workers": 1,
        "argv": ["python", "-c", "print('é')"],
        "code_digest": None,
        "deps": [],
        "env": {"K": "v"},
        "timeout_s": 60.0,
        "state": "queued",
        "path": None,
        "pods": [],
        "submitted": 1_700_000_000.125,
        "started": None,
        "finished": None,
        "exit_code": None,
        "failure": None,
    }
    row.update(kw)
    return row


@pytest.fixture
def store(database_url: str) -> Any:
    s = Store(database_url)
    yield s
    s.close()


def test_migrations_reach_head_and_reopen(database_url: str) -> None:
    Store(database_url).close()
    s = Store(database_url)  # a second open finds the schema at head and changes nothing
    with s.engine.connect() as conn:
        tables = set(sa.inspect(conn).get_table_names())
        version = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
        epoch = conn.execute(sa.text("SELECT epoch FROM leader WHERE id = 1")).scalar()
    s.close()
    assert {"tenants", "jobs", "job_output", "core_events", "code", "leader"} <= tables
    assert version == "0008_revocation" and epoch == 0
    assert "tenant_tokens" in tables


def test_tenants(store: Store) -> None:
    store.add_tenant("b", "h-b")
    store.add_tenant("a", "h-a")
    with pytest.raises(StoreError, match="exists already"):
        store.add_tenant("a", "h-other")
    assert store.tenant_names() == ["a", "b"]
    assert store.tenant_by_hash("h-b", 0.0) == "b" and store.tenant_by_hash("nope", 0.0) is None


def test_batch_writes_jobs_events_and_output_together(store: Store) -> None:
    store.add_tenant("a", "h-a")
    batch = Batch()
    batch.new_jobs.append(_job("j1", key="k1"))
    batch.new_jobs.append(_job("j2", submitted=1_700_000_001.5))
    batch.event(1.5, "submitted", {"id": "j1", "nested": {"list": [1, 2.5, None]}})
    batch.event(2.5, "tick", {})
    batch.output.append({"job": "j1", "seq": 0, "stream": "stdout", "data": b"\x00\xffhi"})
    batch.output.append({"job": "j1", "seq": 1, "stream": "stderr", "data": b"err"})
    batch.commit(store)
    assert not batch

    row = store.get_job("j1")
    assert row is not None and row["argv"] == ["python", "-c", "print('é')"]
    assert row["env"] == {"K": "v"} and row["submitted"] == 1_700_000_000.125
    assert store.job_by_key("a", "k1") == row and store.job_by_key("b", "k1") is None
    assert [e.kind for e in store.events()] == ["submitted", "tick"]
    first = next(iter(store.events()))
    assert first.data == {"id": "j1", "nested": {"list": [1, 2.5, None]}} and first.at == 1.5
    assert store.output("j1") == [(0, "stdout", b"\x00\xffhi"), (1, "stderr", b"err")]
    assert store.output("j1", after=0) == [(1, "stderr", b"err")]
    assert store.last_output_seq("j1") == 1 and store.last_output_seq("j2") == -1
    assert store.queued_counts() == {"plain": 2}

    batch.update_job("j1", state="finished", exit_code=0, finished=3.0)
    batch.commit(store)
    assert [r["id"] for r in store.unfinished_jobs()] == ["j2"]
    assert [r["id"] for r in store.list_jobs("a")] == ["j2", "j1"]  # newest first
    assert [r["id"] for r in store.list_jobs("a", ("finished",))] == ["j1"]
    assert store.list_jobs("b") == [] and len(store.list_jobs(None, limit=1)) == 1
    assert store.queued_counts() == {"plain": 1}


def test_a_job_updated_in_the_batch_that_inserts_it_is_inserted_as_updated(
    store: Store,
) -> None:
    store.add_tenant("a", "h-a")
    first = Batch()
    first.new_jobs.append(_job("j1"))
    first.commit(store)
    statements: list[str] = []
    sa.event.listen(
        store.engine, "before_cursor_execute", lambda *a: statements.append(a[2].split()[0])
    )
    batch = Batch()
    row = _job("j2", key="k2")
    batch.new_jobs.append(row)
    batch.update_job("j2", state="binding", pods=["p1"])  # a submit bound in its own turn
    batch.update_job("j1", state="running")
    batch.commit(store)
    # j2 inserted as updated, j1 updated: one statement each
    assert (statements.count("INSERT"), statements.count("UPDATE")) == (1, 1), statements
    j1, j2 = store.get_job("j1"), store.get_job("j2")
    assert j1 is not None and j1["state"] == "running"
    assert j2 is not None and (j2["state"], j2["pods"], j2["idempotency_key"]) == (
        "binding",
        ["p1"],
        "k2",
    )
    assert row["state"] == "queued" and row["pods"] == []  # the caller's row is its own


def test_a_failed_batch_writes_nothing(store: Store) -> None:
    store.add_tenant("a", "h-a")
    batch = Batch()
    batch.new_jobs.append(_job("j1"))
    batch.event(1.0, "submitted", {"id": "j1"})
    batch.output.append({"job": "j1", "seq": 0, "stream": "stdout", "data": b"x"})
    batch.output.append({"job": "j1", "seq": 0, "stream": "stdout", "data": b"dup"})
    with pytest.raises(sa.exc.IntegrityError):
        batch.commit(store)
    assert store.get_job("j1") is None and list(store.events()) == []


def test_a_failing_fence_rolls_the_batch_back(store: Store) -> None:
    store.add_tenant("a", "h-a")

    def deposed(_conn: Any) -> None:
        raise StoreError("deposed")

    store.fence = deposed
    batch = Batch()
    batch.new_jobs.append(_job("j1"))
    batch.event(1.0, "submitted", {"id": "j1"})
    with pytest.raises(StoreError, match="deposed"):
        batch.commit(store)
    assert store.get_job("j1") is None and list(store.events()) == []


def test_the_loops_connection_commits_at_once_holds_no_snapshot_and_recovers(
    database_url: str,
) -> None:
    loop = Store(database_url)  # the scheduling loop's store
    other = Store(database_url)  # another reader and writer of the same database
    try:
        loop.add_tenant("a", "h-a")
        batch = Batch()
        batch.new_jobs.append(_job("j1", key="k1"))
        batch.event(1.0, "submitted", {"id": "j1"})
        batch.commit(loop)
        assert other.get_job("j1") is not None  # committed when commit returns
        assert loop.job_by_key("a", "k1", loop=True) is not None
        # between turns the loop's connection holds no transaction (no read snapshot):
        # what another writer commits now, the loop's next read sees
        other.add_tenant("b", "h-b")
        with other.transaction() as conn:
            conn.execute(sa.insert(jobs).values(**_job("j2", tenant="b", key="k2")))
        assert loop.job_by_key("b", "k2", loop=True) is not None
        kept = loop._loop_conn
        assert kept is None or not kept.in_transaction()

        failing = Batch()  # a duplicate output chunk: the whole batch fails
        failing.new_jobs.append(_job("j3"))
        failing.output.append({"job": "j3", "seq": 0, "stream": "stdout", "data": b"x"})
        failing.output.append({"job": "j3", "seq": 0, "stream": "stdout", "data": b"dup"})
        with pytest.raises(sa.exc.IntegrityError):
            failing.commit(loop)
        assert other.get_job("j3") is None
        assert loop._loop_conn is None or loop._loop_conn is not kept  # not reused
        batch.new_jobs.append(_job("j4"))
        batch.event(2.0, "submitted", {"id": "j4"})
        batch.commit(loop)  # the loop goes on, on a fresh connection
        assert other.get_job("j4") is not None and other.get_job("j3") is None
        assert [e.data["id"] for e in other.events()] == ["j1", "j4"]
        if loop.engine.dialect.name == "sqlite":  # one connection kept, and only one
            assert loop._loop_conn is not None and loop._loop_conn is not kept
            assert loop.engine.pool.checkedout() == 1
    finally:
        loop.close()
        other.close()


def test_code_digests(store: Store) -> None:
    store.add_tenant("a", "h-a")
    assert not store.has_code("d" * 64)
    store.add_code("d" * 64, 10, "a")
    store.add_code("d" * 64, 10, "a")  # once
    assert store.has_code("d" * 64)


def test_replicas_opening_at_once_migrate_once(postgres_url: str) -> None:
    # several processes, as replicas are (Alembic's context is per process)
    code = "import sys; from stoker.broker.store import Store; Store(sys.argv[1]).close()"
    procs = [
        subprocess.Popen([sys.executable, "-c", code, postgres_url], stderr=subprocess.PIPE)
        for _ in range(4)
    ]
    errors = [p.communicate(timeout=120)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errors
    s = Store(postgres_url)
    with s.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM leader")).scalar() == 1
    s.close()


def test_config_names_the_store_and_the_replica(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text(
        'database_url = "postgresql://u@db/stoker"\n'
        'advertise_url = "http://10.0.0.5:8765"\n'
        'runtime_dir = "/srv/pods"\n'
    )
    cfg = BrokerConfig.load(path)
    assert cfg.store_url == "postgresql://u@db/stoker"
    assert cfg.advertise_url == "http://10.0.0.5:8765" and cfg.runtime_dir == Path("/srv/pods")
    assert normalize_url(cfg.store_url) == "postgresql+psycopg://u@db/stoker"
    plain = BrokerConfig(data_dir=tmp_path)
    assert plain.store_url == f"sqlite:///{tmp_path}/stoker.db"
    assert plain.runtime_dir == tmp_path / "runtime"


@pytest.mark.parametrize(
    "url", ["postgresql://postgres@127.0.0.1:{port}/none", "nosuchdb://x", "postgresql://:bad"]
)
def test_up_with_a_bad_database_url_is_one_line(tmp_path: Path, url: str) -> None:
    url = url.format(port=free_port())  # nothing listens there
    write_keys(tmp_path / "keys")  # PostgreSQL needs the shared keys before it is tried
    res = CliRunner().invoke(
        app,
        ["up", "--data-dir", str(tmp_path), "--keys-dir", str(tmp_path / "keys")],
        env={"STOKER_DATABASE_URL": url},
    )
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("stoker: database_url: cannot open")
    assert res.stderr.strip().count("\n") == 0
