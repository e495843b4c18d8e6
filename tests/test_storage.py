"""Bounded storage through the real broker: a tenant's output budget, retention in the
background, and the disk floor, with nothing acknowledged lost."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import stoker
from rig import PY, Api, broker_config, tenant_api
from stoker.broker.config import StorageConfig
from stoker.broker.embedded import EmbeddedBroker
from stoker.broker.store import Batch, Store
from test_store import _job

MB = 1024 * 1024
PRINT_MB = [PY, "-c", "import sys; sys.stdout.write('x' * (1024 * 1024) + '\\n')"]


def test_output_past_the_budget_is_refused_and_the_job_kept(tmp_path: Path) -> None:
    storage = StorageConfig(output_budget_mb=1, keep_days=None, keep_jobs=None)
    with EmbeddedBroker(broker_config(tmp_path, storage=storage)) as eb:
        t, u = tenant_api(eb, "t"), tenant_api(eb, "u")
        first = t.run(PRINT_MB, tag="a")  # 1 MiB + a newline: over the 1 MiB budget
        second = t.run([PY, "-c", "print('more')"], tag="b")
        other = u.run([PY, "-c", "print('mine')"], tag="c")  # u's budget is its own
        for row in (first, second, other):
            assert row["state"] == "finished" and row["exit_code"] == 0, row
        note = "tenant t's stored output is at its budget of 1048576 bytes"
        assert note in t.output(first["id"]) and "more" not in t.output(second["id"])
        assert note in t.output(second["id"])
        assert u.output(other["id"]) == "mine\n"
        ids = {j["id"] for j in t.http.get("/v1/jobs").json()}
        assert {first["id"], second["id"]} <= ids  # every acknowledged job is there
        stored = Store(eb.cfg.store_url).output_bytes()
        assert stored["t"] <= MB + 1024 and stored["u"] == 5
        metrics = Api(eb.url, eb.admin_token).http.get("/metrics").text
        assert 'stoker_storage_refused_total{reason="budget"} 2.0' in metrics
        assert 'stoker_storage_output_bytes{tenant="u"} 5.0' in metrics


def test_retention_prunes_old_finished_jobs_and_keeps_running_ones(tmp_path: Path) -> None:
    storage = StorageConfig(keep_jobs=2, keep_days=None, prune_every_s=0.2)
    with EmbeddedBroker(broker_config(tmp_path, storage=storage)) as eb:
        t = tenant_api(eb, "t")
        long = t.submit([PY, "-c", "import time; time.sleep(30)"], tag="long").json()["id"]
        done = [t.run([PY, "-c", f"print({i})"], tag="x")["id"] for i in range(4)]
        deadline = time.monotonic() + 30
        while len(t.http.get("/v1/jobs", params={"state": "finished"}).json()) > 2:
            assert time.monotonic() < deadline, "retention did not prune"
            time.sleep(0.1)
        left = {j["id"] for j in t.http.get("/v1/jobs").json()}
        assert left == {long, *done[2:]}  # the newest two finished, and the running one
        assert t.http.get(f"/v1/jobs/{long}").json()["state"] == "running"
        metrics = Api(eb.url, eb.admin_token).http.get("/metrics").text
        assert 'stoker_storage_pruned_jobs_total{tenant="t"} 2.0' in metrics
        assert t.http.post(f"/v1/jobs/{long}/cancel").status_code in (200, 202)


def test_a_nearly_full_disk_refuses_new_jobs_with_a_503(tmp_path: Path) -> None:
    storage = StorageConfig(min_free_fraction=0.999999)
    with EmbeddedBroker(broker_config(tmp_path, storage=storage)) as eb:
        t = tenant_api(eb, "t")
        r = t.submit([PY, "-c", "pass"])
        assert r.status_code == 503, r.text
        assert r.json()["error"] == "storage_full" and "min_free_fraction" in r.json()["message"]
        token = t.token
        began = time.monotonic()
        with stoker.Client(eb.url, token) as c, pytest.raises(stoker.client.StorageFull):
            c.run("plain", ["true"])
        assert time.monotonic() - began < 5  # not retried as an outage would be
        assert t.http.get("/v1/jobs").json() == []  # nothing half-stored


def test_store_prune_never_touches_unfinished_jobs(database_url: str) -> None:
    s = Store(database_url)
    try:
        s.add_tenant("a", "h-a")
        batch = Batch()
        for i in range(5):
            job = _job(f"j{i}", submitted=100.0 + i, state="finished", finished=1000.0 + i)
            batch.new_jobs.append(job)
        batch.new_jobs.append(_job("live", submitted=50.0))  # queued
        batch.output.append({"job": "j0", "seq": 0, "stream": "stdout", "data": b"abc"})
        batch.commit(s)
        assert s.prune(now=2000.0, keep_s=None, keep_jobs=3) == {"a": (2, 3)}
        assert s.prune(now=1003.5, keep_s=1.0, keep_jobs=None) == {"a": (1, 0)}
        assert {j["id"] for j in s.list_jobs("a", (), 100, {})} == {"j3", "j4", "live"}
        assert s.output_bytes() == {}
    finally:
        s.close()
