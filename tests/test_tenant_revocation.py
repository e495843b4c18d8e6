"""Revoking a tenant with every kind of history, and rotating a token, through the real
HTTP API and CLI, on SQLite and PostgreSQL."""

from __future__ import annotations

import time
from pathlib import Path

from typer.testing import CliRunner

from rig import PY, Api, broker_config, code_tar, tenant_api
from stoker.broker.embedded import EmbeddedBroker
from stoker.cli.main import app

LONG = [PY, "-c", "import time; time.sleep(60)"]


def _history(eb: EmbeddedBroker) -> tuple[Api, dict[str, str]]:
    """Tenant t with a secret, an uploaded archive, a finished, a running and a queued job."""
    t = tenant_api(eb, "t")
    assert t.http.post("/v1/secrets", json={"name": "KEY", "value": "hunter2"}).status_code == 201
    r = t.http.post("/v1/code", content=code_tar({"main.py": "print('code')"}))
    assert r.status_code in (200, 201), r.text
    digest = r.json()["digest"]
    done = t.run([PY, "-c", "print('done')"], tag="done")
    assert done["exit_code"] == 0
    running = t.submit(LONG, tag="r1").json()["id"]
    t.submit(LONG, tag="r2")  # the broker's two slots: both run
    queued = t.submit(LONG, tag="q").json()["id"]
    deadline = time.monotonic() + 30
    while t.http.get(f"/v1/jobs/{running}").json()["state"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return t, {"digest": digest, "done": done["id"], "running": running, "queued": queued}


def _code_file(eb: EmbeddedBroker, digest: str) -> Path:
    return eb.cfg.runtime_dir / "code" / digest


def test_revoking_a_tenant_with_history_keeps_it_and_refuses_the_token(
    tmp_path: Path, database_url: str
) -> None:
    with EmbeddedBroker(broker_config(tmp_path, database_url=database_url)) as eb:
        t, ids = _history(eb)
        assert _code_file(eb, ids["digest"]).exists()
        admin = Api(eb.url, eb.admin_token)
        r = admin.http.delete("/v1/tenants/t")
        assert r.status_code == 200, r.text
        assert r.json() == {"name": "t", "cancelled": 3, "history": "kept", "jobs_deleted": 0}
        # the very next request with its token is refused, on every route
        assert t.http.get("/v1/jobs").status_code == 401
        assert t.submit([PY, "-c", "pass"]).status_code == 401
        assert t.http.get("/v1/secrets").status_code == 401
        # its jobs were cancelled through the core and end; its history stays for the admin
        for key in ("running", "queued"):
            row = admin.wait(ids[key], timeout_s=60)
            assert row["state"] == "finished" and row["failure"] == "cancelled", row
        assert admin.http.get(f"/v1/jobs/{ids['done']}").json()["exit_code"] == 0
        kept = admin.http.get("/v1/jobs", params={"tenant": "t", "limit": 10})
        assert kept.status_code == 200 and len(kept.json()) == 4, kept.text
        deadline = time.monotonic() + 30  # its pods stop, none kept warm for it
        while any(p["tenant"] == "t" for p in admin.pods()):
            assert time.monotonic() < deadline, admin.pods()
            time.sleep(0.1)
        assert not _code_file(eb, ids["digest"]).exists()  # no tenant claims it now
        assert "t" not in admin.http.get("/v1/tenants").json()
        # the name is not reused while its history is kept
        r = admin.http.post("/v1/tenants", json={"name": "t"})
        assert r.status_code == 409 and "purge" in r.json()["message"]
        # purge: the history goes, the name is free, a new t sees nothing of the old one
        r = admin.http.delete("/v1/tenants/t", params={"purge": True})
        assert r.status_code == 200 and r.json()["history"] == "deleted", r.text
        assert r.json()["jobs_deleted"] == 4
        assert admin.http.get(f"/v1/jobs/{ids['done']}").status_code == 404
        again = tenant_api(eb, "t")
        assert again.http.get("/v1/jobs").json() == []
        assert again.http.get("/v1/secrets").json() == []
        r = again.submit([PY, "-c", "pass"], code_digest=ids["digest"])
        assert r.status_code == 404  # the old archive is gone for the new tenant too
        assert admin.http.delete("/v1/tenants/nobody").status_code == 404
        assert admin.http.delete("/v1/tenants/t").status_code == 200  # the new t
        assert admin.http.delete("/v1/tenants/t").status_code == 404  # revoked already


def test_tenant_history_delete_removes_it_with_the_tenant(tmp_path: Path) -> None:
    with EmbeddedBroker(broker_config(tmp_path, tenant_history="delete")) as eb:
        t, ids = _history(eb)
        admin = Api(eb.url, eb.admin_token)
        r = admin.http.delete("/v1/tenants/t")
        assert r.status_code == 200, r.text
        assert r.json()["history"] == "deleted" and r.json()["jobs_deleted"] == 4
        assert t.http.get("/v1/jobs").status_code == 401
        for key in ("done", "running", "queued"):
            assert admin.http.get(f"/v1/jobs/{ids[key]}").status_code == 404
        tenant_api(eb, "t")  # the name is free at once


def test_rotation_keeps_the_old_token_for_its_grace(tmp_path: Path, database_url: str) -> None:
    with EmbeddedBroker(broker_config(tmp_path, database_url=database_url)) as eb:
        t = tenant_api(eb, "t")
        admin = Api(eb.url, eb.admin_token)
        # a long grace, so a slow request on a loaded machine still falls inside it
        r = admin.http.post("/v1/tenants/t/token", params={"grace_s": 3600})
        assert r.status_code == 200, r.text
        second = Api(eb.url, r.json()["token"])
        assert t.http.get("/v1/jobs").status_code == 200  # in its grace
        assert second.http.get("/v1/jobs").status_code == 200
        # a short one: the second token is refused once it has passed
        r = admin.http.post("/v1/tenants/t/token", params={"grace_s": 1})
        assert r.status_code == 200, r.text
        third = Api(eb.url, r.json()["token"])
        deadline = time.monotonic() + 10
        while second.http.get("/v1/jobs").status_code == 200:
            assert time.monotonic() < deadline, "the old token outlived its grace"
            time.sleep(0.1)
        assert second.http.get("/v1/jobs").status_code == 401
        assert third.http.get("/v1/jobs").status_code == 200
        r = admin.http.post("/v1/tenants/t/token", params={"grace_s": 0})
        assert third.http.get("/v1/jobs").status_code == 401  # no grace: refused at once
        assert Api(eb.url, r.json()["token"]).http.get("/v1/jobs").status_code == 200
        assert admin.http.post("/v1/tenants/x/token").status_code == 404
        assert third.http.post("/v1/tenants/t/token").status_code == 401


def test_cli_delete_and_rotate(tmp_path: Path) -> None:
    runner = CliRunner()
    with EmbeddedBroker(broker_config(tmp_path)) as eb:
        t = tenant_api(eb, "t")
        base = ["--url", eb.url, "--token", eb.admin_token]
        r = runner.invoke(app, ["tenant", "rotate", "t", "--grace", "0", *base])
        assert r.exit_code == 0, r.output
        token = r.output.strip()
        assert Api(eb.url, token).http.get("/v1/jobs").status_code == 200
        assert t.http.get("/v1/jobs").status_code == 401
        r = runner.invoke(app, ["tenant", "delete", "t", *base])
        assert r.exit_code == 0 and "history kept" in r.output, r.output
        assert Api(eb.url, token).http.get("/v1/jobs").status_code == 401
        r = runner.invoke(app, ["tenant", "delete", "nobody", *base])
        assert r.exit_code != 0 and "no tenant 'nobody'" in r.output
