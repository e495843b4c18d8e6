"""Leadership on a real PostgreSQL server: one leader at a time, a fenced deposed leader, and
followers that serve reads and forward writes through the real HTTP API."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from leaks import leftovers
from stoker.broker.auth import write_keys
from stoker.broker.config import BrokerConfig, BrokerProfile
from stoker.broker.embedded import EmbeddedBroker, free_port
from stoker.broker.leader import Leadership
from stoker.broker.store import Batch, Deposed, Store, leader


def _submit_batch(store: Store, job_id: str) -> Batch:
    batch = Batch()
    batch.event(1.0, "tick", {"job": job_id})
    return batch


def test_one_leader_at_a_time_and_a_deposed_one_cannot_write(postgres_url: str) -> None:
    async def scenario() -> None:
        sa_, sb = Store(postgres_url), Store(postgres_url)
        a = Leadership(sa_, "http://a", poll_s=0.05)
        b = Leadership(sb, "http://b", poll_s=0.05)
        try:
            assert await a.try_acquire() and a.epoch == 1
            assert not await b.try_acquire()  # the lock is a's
            assert b.current().url == "http://a"
            _submit_batch(sa_, "a1").commit(sa_)  # the leader writes

            # a's lock session dies without a noticing (a partition, a stalled process)
            assert a._conn is not None
            pid = a._conn.execute(sa.text("SELECT pg_backend_pid()")).scalar()
            with sb.engine.connect() as conn:
                conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid})
            deadline = time.monotonic() + 5
            while not await b.try_acquire():
                assert time.monotonic() < deadline, "b never got the lead"
                await asyncio.sleep(0.05)
            assert b.epoch == 2 and b.current().url == "http://b"

            # a still believes it leads; its next scheduling write is fenced off
            with pytest.raises(Deposed):
                _submit_batch(sa_, "a2").commit(sa_)
            assert not a.leading
            await asyncio.wait_for(a.hold(), 5)  # and its hold ends
            _submit_batch(sb, "b1").commit(sb)  # the new leader writes
            assert [e.data["job"] for e in sb.events()] == ["a1", "b1"]
        finally:
            a.release()
            b.release()
            sa_.close()
            sb.close()

    asyncio.run(scenario())


def test_a_leader_that_cannot_confirm_its_lock_steps_down(postgres_url: str) -> None:
    async def scenario() -> None:
        store = Store(postgres_url)
        a = Leadership(store, "http://a", poll_s=0.05)
        try:
            assert await a.try_acquire()
            with store.engine.begin() as conn:  # someone else bumped the epoch
                conn.execute(leader.update().values(epoch=leader.c.epoch + 1))
            await asyncio.wait_for(a.hold(), 5)
            assert not a.leading
        finally:
            a.release()
            store.close()

    asyncio.run(scenario())


def test_sqlite_leads_alone(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = Store.sqlite(tmp_path / "s.db")
        a = Leadership(store, "")
        assert await a.try_acquire() and a.epoch == 1 and a.leading
        _submit_batch(store, "x").commit(store)  # the fence passes on SQLite too
        a.release()
        store.close()

    asyncio.run(scenario())


# ----------------------------------------------------------------------------- over HTTP


def sandboxed(test: Callable[..., None]) -> Callable[..., None]:
    """A test of brokers with real sandboxes: needs bubblewrap, may take two minutes."""
    test = pytest.mark.timeout(120)(test)
    no_bwrap = shutil.which("bwrap") is None
    return pytest.mark.skipif(no_bwrap, reason="bubblewrap (bwrap) not installed")(test)


def _cfg(root: Path, name: str, database_url: str) -> BrokerConfig:
    write_keys(root / "keys")  # the replicas' one keys dir (the Secret stoker-keys)
    return BrokerConfig(
        data_dir=root / name,
        keys_dir=root / "keys",
        profiles=[BrokerProfile.simple("plain", standby=False)],
        gpu_slots=1,
        database_url=database_url,
        runtime_root=root / "pods",
    )


def _pair(root: Path, database_url: str) -> tuple[EmbeddedBroker, EmbeddedBroker]:
    """Two embedded replicas on one database and pods directory; the first one leads."""
    lead = EmbeddedBroker(_cfg(root, "a", database_url)).start()
    return lead, EmbeddedBroker(_cfg(root, "b", database_url)).start()


def _api(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


@sandboxed
def test_follower_serves_reads_and_forwards_writes(tmp_path: Path, postgres_url: str) -> None:
    lead, follow = _pair(tmp_path, postgres_url)
    try:
        assert httpx.get(f"{lead.url}/v1/ready").json()["status"] == "ready"
        assert httpx.get(f"{follow.url}/v1/ready").json()["status"] == "following"
        admin = _api(follow.url, lead.admin_token)
        r = admin.post("/v1/tenants", json={"name": "t"})
        assert r.status_code == 201, r.text
        f = _api(follow.url, r.json()["token"])

        body: dict[str, Any] = {
            "profile": "plain",
            "argv": ["python", "-c", "print('via the follower')"],
            "reuse_tag": "x",
        }
        r = f.post("/v1/jobs", json=body, headers={"Idempotency-Key": "k1"})
        assert r.status_code == 201, r.text
        assert r.headers["x-stoker-leader"] == lead.url  # the leader placed it
        job = r.json()["id"]
        again = f.post("/v1/jobs", json=body, headers={"Idempotency-Key": "k1"})
        assert (again.status_code, again.json()["id"]) == (200, job)
        done = f.get(f"/v1/jobs/{job}/wait", params={"timeout_s": 60}).json()
        assert (done["state"], done["exit_code"]) == ("finished", 0)  # waited on the store
        lines = [json.loads(x) for x in f.get(f"/v1/jobs/{job}/output").text.splitlines()]
        out = b"".join(base64.b64decode(m["data"]) for m in lines if "data" in m)
        assert out == b"via the follower\n" and lines[-1]["end"]["id"] == job
        assert [j["id"] for j in f.get("/v1/jobs").json()] == [job]
        assert [p["id"] for p in f.get("/v1/pods").json()] == done["pods"]  # the leader's view

        bad = f.post("/v1/jobs", json={**body, "profile": "nope"})  # the leader's 4xx, as is
        assert bad.status_code == 422 and bad.json()["field"] == "body.profile"
        assert f.post(f"/v1/jobs/{job}/cancel").status_code == 200

        # a dashboard session signed by one replica opens on the other (one Service: the
        # next page may reach either)
        viewer = lead.cfg.viewer_token_path.read_text().strip()
        form = httpx.get(f"{lead.url}/")  # the sign-in form and its CSRF cookie, as a browser
        csrf = form.text.split('name="csrf" value="')[1].split('"')[0]
        signed = httpx.post(
            f"{lead.url}/login", data={"token": viewer, "csrf": csrf}, cookies=form.cookies
        )
        assert signed.status_code == 303
        cookies = {"stoker_session": signed.cookies["stoker_session"]}
        page = httpx.get(f"{follow.url}/", cookies=cookies).text
        assert page != httpx.get(f"{follow.url}/").text  # the dashboard, not the sign-in
    finally:
        follow.stop()
        lead.stop()
    assert not leftovers(tmp_path), leftovers(tmp_path)


@sandboxed
def test_no_leader_answers_503_then_the_follower_takes_over(
    tmp_path: Path, postgres_url: str
) -> None:
    async def hold_the_lock(store: Store, stop: asyncio.Event) -> None:
        dead = Leadership(store, f"http://127.0.0.1:{free_port()}")  # nothing listens there
        assert await dead.try_acquire()
        await stop.wait()
        dead.release()

    store = Store(postgres_url)
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    task = loop.create_task(hold_the_lock(store, stop))
    loop.run_until_complete(asyncio.sleep(0.5))
    cfg = _cfg(tmp_path, "b", postgres_url)
    follow = EmbeddedBroker(cfg).start()
    try:
        admin = _api(follow.url, follow.admin_token)
        t = admin.post("/v1/tenants", json={"name": "t"}).json()["token"]
        f = _api(follow.url, t)
        body = {"profile": "plain", "argv": ["python", "-c", "pass"], "reuse_tag": "x"}
        r = f.post("/v1/jobs", json=body)
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert r.headers["x-stoker-leader"].startswith("http://127.0.0.1:")
        assert f.get("/v1/jobs").json() == []  # nothing was stored

        loop.call_soon(stop.set)
        loop.run_until_complete(task)  # the lock holder goes: the follower takes over
        deadline = time.monotonic() + 10
        while httpx.get(f"{follow.url}/v1/ready").json()["status"] != "ready":
            assert time.monotonic() < deadline, "the follower did not take over"
            time.sleep(0.05)
        r = f.post("/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        done = f.get(f"/v1/jobs/{r.json()['id']}/wait", params={"timeout_s": 60}).json()
        assert done["exit_code"] == 0
    finally:
        follow.stop()
        loop.close()
        store.close()
    assert not leftovers(tmp_path), leftovers(tmp_path)


@sandboxed
def test_a_leader_cut_off_from_its_lock_steps_down(tmp_path: Path, postgres_url: str) -> None:
    a, b = _pair(tmp_path, postgres_url)
    store = Store(postgres_url)
    try:
        admin = _api(b.url, a.admin_token)
        f = _api(b.url, admin.post("/v1/tenants", json={"name": "t"}).json()["token"])
        body = {"profile": "plain", "argv": ["python", "-c", "pass"], "reuse_tag": "x"}
        first = f.post("/v1/jobs", json=body).json()["id"]
        assert f.get(f"/v1/jobs/{first}/wait", params={"timeout_s": 60}).json()["exit_code"] == 0

        # end a's lock session behind its back: a must notice, stop scheduling, and the
        # lead goes to whichever replica campaigns first (a may win it back)
        assert a.broker is not None and a.broker.leadership._conn is not None
        pid = a.broker.leadership._conn.execute(sa.text("SELECT pg_backend_pid()")).scalar()
        with store.engine.connect() as conn:
            conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid})
        deadline = time.monotonic() + 10
        while Leadership(store, "").current().epoch < 2:
            assert time.monotonic() < deadline, "nobody took the lead again"
            time.sleep(0.05)
        while True:
            roles = sorted(httpx.get(f"{u}/v1/ready").json()["status"] for u in (a.url, b.url))
            if roles == ["following", "ready"]:
                break
            assert time.monotonic() < deadline, roles
            time.sleep(0.05)
        second = f.post("/v1/jobs", json=body)
        assert second.status_code == 201, second.text
        done = f.get(f"/v1/jobs/{second.json()['id']}/wait", params={"timeout_s": 60}).json()
        assert done["exit_code"] == 0
        assert len(f.get("/v1/pods").json()) == 1  # the new leader adopted the one pod
    finally:
        store.close()
        b.stop()
        a.stop()
    assert not leftovers(tmp_path), leftovers(tmp_path)


@sandboxed
def test_a_submit_fenced_off_mid_request_is_503_and_stores_nothing(
    tmp_path: Path, postgres_url: str
) -> None:
    eb = EmbeddedBroker(_cfg(tmp_path, "a", postgres_url)).start()
    store = Store(postgres_url)
    try:
        assert eb.broker is not None
        admin = _api(eb.url, eb.admin_token)
        t = _api(eb.url, admin.post("/v1/tenants", json={"name": "t"}).json()["token"])
        lead = eb.broker.leadership
        lead._confirm = lambda *_: None  # type: ignore[method-assign]  # a check that lags
        with store.engine.begin() as conn:  # another replica's epoch, as after a takeover
            conn.execute(leader.update().values(epoch=leader.c.epoch + 1))
        body = {"profile": "plain", "argv": ["python", "-c", "pass"], "reuse_tag": "x"}
        r = t.post("/v1/jobs", json=body, headers={"Idempotency-Key": "k"})
        assert r.status_code == 503 and r.headers["retry-after"] == "1", r.text
        with store.engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM jobs")).scalar() == 0
        del lead._confirm
        # it stepped down, and as the only replica campaigns and leads again (epoch 3)
        deadline = time.monotonic() + 10
        while Leadership(store, "").current().epoch < 3 or not eb.broker.leads:
            assert time.monotonic() < deadline, "the broker did not lead again"
            time.sleep(0.05)
        r = t.post("/v1/jobs", json=body, headers={"Idempotency-Key": "k"})
        assert r.status_code == 201, r.text
        assert (
            t.get(f"/v1/jobs/{r.json()['id']}/wait", params={"timeout_s": 60}).json()["exit_code"]
            == 0
        )
    finally:
        store.close()
        eb.stop()
    assert not leftovers(tmp_path), leftovers(tmp_path)
