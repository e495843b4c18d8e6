"""What a hostile tenant (or a copy of the store) must not get from the broker: env values and
secrets, another tenant's code, a crash from bad input; and one broker per data dir.

Real broker (uvicorn on 127.0.0.1), real SQLite file, real sandboxes, real HTTP."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import sqlite3
import stat
from pathlib import Path

import httpx
import pytest
import sqlalchemy
from typer.testing import CliRunner

from rig import PY, Api, broker_config, code_tar, tenant_api
from stoker.broker.app import Broker, BrokerLocked
from stoker.broker.embedded import EmbeddedBroker
from stoker.broker.secrets import SecretBox
from stoker.cli.main import app

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) not installed"),
    pytest.mark.timeout(120),
]

SECRET = "s3cr3t-value-0f-a-tenant"
ENV_VALUE = "env-value-that-must-stay-put"


def _store_bytes(data_dir: Path) -> bytes:
    """Everything the store wrote (the database and its WAL), as a thief would copy it."""
    return b"".join(p.read_bytes() for p in sorted(data_dir.glob("stoker.db*")))


def test_env_values_and_secrets_never_leave(tmp_path: Path) -> None:
    with EmbeddedBroker(broker_config(tmp_path)) as eb:
        a, b = tenant_api(eb, "a"), tenant_api(eb, "b")
        r = a.http.post("/v1/secrets", json={"name": "API_KEY", "value": SECRET})
        assert r.status_code == 201 and SECRET not in r.text
        assert (
            a.http.post("/v1/secrets", json={"name": "API_KEY", "value": SECRET}).status_code == 200
        )
        listed = a.http.get("/v1/secrets").json()
        assert [s["name"] for s in listed] == ["API_KEY"] and SECRET not in json.dumps(listed)
        assert b.http.get("/v1/secrets").json() == []  # secrets are their tenant's
        # another tenant cannot use it by name
        r = b.submit([PY, "-c", "pass"], secrets=["API_KEY"])
        assert r.status_code == 422 and r.json()["field"] == "body.secrets"
        # the job proves it got both values without them in its argv or output
        probe = (
            "import hashlib, os\n"
            "for k in ('API_KEY', 'PLAIN'):\n"
            "    print(hashlib.sha256(os.environ[k].encode()).hexdigest())\n"
        )
        job = a.run([PY, "-c", probe], env={"PLAIN": ENV_VALUE}, secrets=["API_KEY"])
        want = [hashlib.sha256(v.encode()).hexdigest() for v in (SECRET, ENV_VALUE)]
        assert job["exit_code"] == 0 and a.output(job["id"]).split() == want
        # names only, in every view
        assert job["env"] == ["PLAIN"] and job["secrets"] == ["API_KEY"]
        views = [
            a.http.get(f"/v1/jobs/{job['id']}").text,
            a.http.get("/v1/jobs").text,
            Api(eb.url, eb.admin_token).http.get("/v1/jobs").text,
            a.http.get(f"/v1/jobs/{job['id']}/output", params={"follow": False}).text,
        ]
        token = a.token
        ps = CliRunner().invoke(
            app, ["ps", "--json"], env={"STOKER_URL": eb.url, "STOKER_TOKEN": token}
        )
        assert ps.exit_code == 0, ps.output
        views.append(ps.stdout)
        for text in views:
            assert SECRET not in text and ENV_VALUE not in text
        # a secret deleted before its job binds fails that job, naming it (not its value)
        assert a.http.delete("/v1/secrets/API_KEY").status_code == 204
        assert a.http.delete("/v1/secrets/API_KEY").status_code == 404
        r = a.submit([PY, "-c", "pass"], secrets=["API_KEY"])
        assert r.status_code == 422 and "API_KEY" in r.json()["message"]
        data_dir = eb.cfg.data_dir
    # a copy of the store alone holds neither value
    stored = _store_bytes(data_dir)
    assert stored and SECRET.encode() not in stored and ENV_VALUE.encode() not in stored
    logs = b"".join(p.read_bytes() for p in data_dir.rglob("*.log"))
    assert SECRET.encode() not in logs and ENV_VALUE.encode() not in logs
    for name in ("stoker.db", "admin.token", "secret.key"):
        mode = stat.S_IMODE((data_dir / name).stat().st_mode)
        assert mode == 0o600, (name, oct(mode))


def test_secret_cli_reads_the_value_from_stdin_only(tmp_path: Path) -> None:
    with EmbeddedBroker(broker_config(tmp_path)) as eb:
        a = tenant_api(eb, "a")
        env = {"STOKER_URL": eb.url, "STOKER_TOKEN": a.token}
        runner = CliRunner()
        res = runner.invoke(app, ["secret", "set", "TOKEN"], input=SECRET + "\n", env=env)
        assert res.exit_code == 0, res.output
        assert SECRET not in res.output
        res = runner.invoke(app, ["secret", "list", "--json"], env=env)
        assert [s["name"] for s in json.loads(res.stdout)] == ["TOKEN"]
        job = a.run([PY, "-c", "import os; print(len(os.environ['TOKEN']))"], secrets=["TOKEN"])
        assert a.output(job["id"]).strip() == str(len(SECRET))  # the newline is not kept
        res = runner.invoke(app, ["secret", "set", "STOKER_X"], input="v\n", env=env)
        assert res.exit_code != 0 and "STOKER_X" in res.output
        assert runner.invoke(app, ["secret", "delete", "TOKEN"], env=env).exit_code == 0
        assert json.loads(runner.invoke(app, ["secret", "list", "--json"], env=env).stdout) == []


def test_code_is_scoped_to_its_tenant(tmp_path: Path) -> None:
    with EmbeddedBroker(broker_config(tmp_path)) as eb:
        a, b = tenant_api(eb, "a"), tenant_api(eb, "b")
        mine = code_tar({"main.py": "print('a-code')\n"})
        digest = a.http.post("/v1/code", content=mine).json()["digest"]
        assert a.http.head(f"/v1/code/{digest}").status_code == 200
        # to b, a's archive does not exist: HEAD and a submit naming it answer as if absent
        assert b.http.head(f"/v1/code/{digest}").status_code == 404
        r = b.submit([PY, "main.py"], code_digest=digest)
        assert r.status_code == 404 and r.json()["field"] == "body.code_digest"  # upload it
        # b uploads its own; its pod sees that archive and nothing of a's
        theirs = code_tar({"main.py": "import os; print(sorted(os.listdir('/stoker/code')))\n"})
        b_digest = b.http.post("/v1/code", content=theirs).json()["digest"]
        job = b.run([PY, "main.py"], code_digest=b_digest)
        assert job["exit_code"] == 0
        assert json.loads(b.output(job["id"]).replace("'", '"')) == [b_digest]
        # uploading the same bytes makes them b's too (and still works for a)
        assert b.http.post("/v1/code", content=mine).status_code == 201
        assert b.http.head(f"/v1/code/{digest}").status_code == 200
        assert a.run([PY, "main.py"], code_digest=digest, tag="y")["exit_code"] == 0


def test_bad_bodies_get_the_documented_error(tmp_path: Path) -> None:
    with EmbeddedBroker(broker_config(tmp_path, max_request_bytes=256 * 1024)) as eb:
        a = tenant_api(eb, "a")
        json_ct = {"content-type": "application/json"}
        cases = [
            (b"[" * 100_000 + b"]" * 100_000, "body"),  # nested too deeply to parse
            (b"{not json", "body"),
            (b"\xff\xfe", "body"),
            (b'"a string"', "body"),
            (b'{"profile":"plain","argv":["python","\\ud800"],"reuse_tag":"x"}', "body.argv"),
            (b'{"profile":"plain","argv":["true"],"reuse_tag":"\\udfff"}', "body.reuse_tag"),
            (
                b'{"profile":"plain","argv":["true"],"reuse_tag":"x","env":{"K":"\\ud800"}}',
                "body.env",
            ),
        ]
        for body, field in cases:
            r = a.http.post("/v1/jobs", content=body, headers=json_ct)
            assert r.status_code in (400, 422), (body[:40], r.status_code, r.text[:200])
            assert set(r.json()) == {"error", "field", "message"}, r.text[:200]
            assert r.json()["field"] == field, (body[:40], r.json())
        for name in ("CUDA_VISIBLE_DEVICES", "STOKER_JOB", "STOKER_ANYTHING", "RANK"):
            r = a.submit([PY, "-c", "pass"], env={name: "1"})
            assert r.status_code == 422 and r.json()["field"] == "body.env", r.text
            assert name in r.json()["message"]
        big = {"profile": "plain", "argv": ["true", "x" * 300_000], "reuse_tag": "x"}
        r = a.http.post("/v1/jobs", json=big)
        assert r.status_code == 413 and r.json()["field"] == "body"

        def chunks():  # no content-length: the cap counts what arrives
            for _ in range(300):
                yield b" " * 1024

        r = a.http.post("/v1/jobs", content=chunks(), headers=json_ct)
        assert r.status_code == 413 and r.json()["error"] == "too_large"
        assert a.http.get("/v1/nowhere").json()["error"] == "not_found"
        # the same idempotency key with another body is refused; the same body is a retry
        h = {"Idempotency-Key": "k-1"}
        body = {"profile": "plain", "argv": [PY, "-c", "pass"], "reuse_tag": "x"}
        r1 = a.http.post("/v1/jobs", json=body, headers=h)
        r2 = a.http.post("/v1/jobs", json={**body, "argv": [PY, "-c", "1"]}, headers=h)
        r3 = a.http.post("/v1/jobs", json=body, headers=h)
        assert (r1.status_code, r2.status_code, r3.status_code) == (201, 422, 200)
        assert r2.json()["field"] == "idempotency-key" and r3.json()["id"] == r1.json()["id"]
        # nothing of the refused bodies was stored, and the broker still answers
        assert [j["id"] for j in a.http.get("/v1/jobs").json()] == [r1.json()["id"]]
        db = eb.cfg.db_path
    with sqlite3.connect(db) as conn:
        assert conn.execute("select count(*) from jobs").fetchone()[0] == 1


def test_bodies_are_strict_an_unknown_field_or_a_coercion_is_a_422_naming_it(
    tmp_path: Path,
) -> None:
    # a field the broker does not know ("replicas") was dropped unseen, and "60" read as 60:
    # each is now refused, naming the field, on every body (the submit's fast path included)
    with EmbeddedBroker(broker_config(tmp_path)) as eb:
        a = tenant_api(eb, "a")
        admin = Api(eb.url, eb.admin_token)
        job = {"profile": "plain", "argv": [PY, "-c", "pass"], "reuse_tag": "x"}
        renew = {"profile": "plain", "reuse_tag": "x", "keepalive_s": 30}
        run = {"code": "pass", "language": "python"}
        cases = [
            (a, "/v1/jobs", {**job, "replicas": 3}, "body.replicas"),
            (a, "/v1/jobs", {**job, "timeout_s": "60"}, "body.timeout_s"),
            (a, "/v1/jobs", {**job, "workers": "2"}, "body.workers"),
            (a, "/v1/jobs", {**job, "workers": 2.0}, "body.workers"),
            (a, "/v1/jobs", {**job, "workers": True}, "body.workers"),
            (a, "/v1/jobs", {**job, "gpus": "0.5"}, "body.gpus"),
            (a, "/v1/jobs", {**job, "env": {"K": 1}}, "body.env.K"),
            (a, "/v1/keepalive", {**renew, "keepalive_s": "30"}, "body.keepalive_s"),
            (a, "/v1/keepalive", {**renew, "pods": 2}, "body.pods"),
            (a, "/v1/secrets", {"name": "K", "value": "v", "shared": True}, "body.shared"),
            (a, "/v1/secrets", {"name": "K", "value": 123}, "body.value"),
            (admin, "/v1/tenants", {"name": "b", "admin": True}, "body.admin"),
            (a, "/sandbox-fusion/run_code", {**run, "run_timeout": "5"}, "body.run_timeout"),
            (a, "/sandbox-fusion/run_code", {**run, "timeout": 5}, "body.timeout"),
        ]
        for api, path, body, field in cases:
            r = api.http.post(path, json=body)
            assert r.status_code == 422, (path, body, r.status_code, r.text)
            assert r.json()["field"] == field, (path, body, r.json())
            assert field in r.json()["message"]
        # nothing of them was kept; the same bodies without the fault pass
        assert a.http.get("/v1/jobs").json() == [] and a.http.get("/v1/secrets").json() == []
        assert admin.http.get("/v1/tenants").json() == ["a"]
        assert a.http.post("/v1/jobs", json={**job, "timeout_s": 60}).status_code == 201
        db = eb.cfg.db_path
    with sqlite3.connect(db) as conn:
        assert conn.execute("select count(*) from jobs").fetchone()[0] == 1


def test_deps_that_look_like_files_are_refused_naming_the_rule(tmp_path: Path) -> None:
    # foo.tar.gz is a valid PEP 508 name, but uv would install ./foo.tar.gz from its
    # working directory: refused at submit, the message saying why
    with EmbeddedBroker(broker_config(tmp_path)) as eb:
        a = tenant_api(eb, "a")
        files = ("foo.tar.gz", "foo-1.0-py3-none-any.whl", "wheels/foo", "x.zip; os_name=='posix'")
        for dep in files:
            r = a.submit([PY, "-c", "pass"], deps=["numpy", dep])
            assert r.status_code == 422 and r.json()["field"] == "body.deps", (dep, r.text)
            assert "deps[1]" in r.json()["message"] and "looks like a file" in r.json()["message"]
        assert a.http.get("/v1/jobs").json() == []


def test_openapi_documents_code_body_and_refusals(tmp_path: Path) -> None:
    with EmbeddedBroker(broker_config(tmp_path)) as eb:
        doc = httpx.get(f"{eb.url}/openapi.json").json()
    code = doc["paths"]["/v1/code"]["post"]
    assert "application/octet-stream" in code["requestBody"]["content"]
    for path, method in (("/v1/jobs", "post"), ("/v1/tenants", "get"), ("/v1/secrets", "post")):
        responses = doc["paths"][path][method]["responses"]
        assert {"403", "422"} <= set(responses), (path, sorted(responses))
        assert responses["422"]["content"]["application/json"]["schema"]["$ref"].endswith(
            "ErrorBody"
        )
    assert "/v1/secrets" in doc["paths"] and "get" in doc["paths"]["/v1/secrets"]


def test_one_broker_per_data_dir(tmp_path: Path) -> None:
    cfg = broker_config(tmp_path)
    with EmbeddedBroker(cfg) as eb:
        a = tenant_api(eb, "a")
        a.run([PY, "-c", "pass"])
        pods_before = sorted(p.name for p in cfg.runtime_dir.joinpath("pods").iterdir())
        with pytest.raises(BrokerLocked, match="in use by another broker"):
            Broker(cfg)
        # the second broker touched nothing: the first one's pods and jobs are as they were
        assert sorted(p.name for p in cfg.runtime_dir.joinpath("pods").iterdir()) == pods_before
        assert a.run([PY, "-c", "pass"])["path"] == "warm"
    asyncio.run(Broker(cfg).close())  # free again once the first broker is gone


def test_migration_0002_keeps_unfinished_env_and_drops_finished_values(tmp_path: Path) -> None:
    # a store written before 0002_secrets: env values plain in the jobs table
    from alembic import command
    from alembic.config import Config as AlembicConfig

    from stoker.broker.store import _MIGRATIONS, Store

    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as conn:
        cfg = AlembicConfig()
        cfg.set_main_option("script_location", _MIGRATIONS)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
        conn.execute(sqlalchemy.text("INSERT INTO tenants VALUES ('a', 'h', 0)"))
        for job, state in (("j-done", "finished"), ("j-todo", "queued")):
            conn.execute(
                sqlalchemy.text(
                    "INSERT INTO jobs (id, tenant, profile, reuse_tag, replicas, argv, deps,"
                    " env, timeout_s, state, pods, submitted) VALUES (:id, 'a', 'plain', 'x',"
                    " 1, '[]', '[]', :env, 1, :state, '[]', 0)"
                ),
                {"id": job, "env": json.dumps({"K": ENV_VALUE}), "state": state},
            )
    engine.dispose()
    store = Store(url)  # upgrades to head
    try:
        done, todo = store.get_job("j-done"), store.get_job("j-todo")
        assert done is not None and done["env"] == {"K": ""} and done["secrets"] == []
        # still to be bound: kept, and opened as it is (it was never sealed)
        assert todo is not None and todo["env"] == {"K": ENV_VALUE}
        box = SecretBox(tmp_path / "secret.key")
        assert box.open_env(todo["env"]) == {"K": ENV_VALUE}
        assert box.open(box.seal(ENV_VALUE)) == ENV_VALUE != box.seal(ENV_VALUE)
    finally:
        store.close()


def test_a_key_rotation_keeps_every_secret_open(tmp_path: Path) -> None:
    """The steps docs/guides/kubernetes.md gives: a new key put first in secret.key, the broker
    restarted (it re-seals the tenants' secrets under the new key as it takes the lead),
    then the old key dropped: the secret still opens in a job, and a submit retried with
    its idempotency key across the rotation finds its first job."""
    from stoker.broker.auth import write_keys
    from stoker.broker.secrets import new_key

    keys = tmp_path / "keys"
    write_keys(keys)
    old = (keys / "secret.key").read_bytes()
    cfg = broker_config(tmp_path, keys_dir=keys)
    argv = [PY, "-c", "import os; print(os.environ['API_KEY'][::-1])"]
    with EmbeddedBroker(cfg) as eb:
        a = tenant_api(eb, "a")
        assert a.http.post("/v1/secrets", json={"name": "API_KEY", "value": SECRET}).is_success
        first = a.http.post(
            "/v1/jobs",
            json={"profile": "plain", "argv": argv, "reuse_tag": "x", "secrets": ["API_KEY"]},
            headers={"Idempotency-Key": "k1"},
        ).json()
        token = a.token
    new = new_key()
    (keys / "secret.key").write_bytes(new + b"\n" + old)
    with EmbeddedBroker(cfg) as eb:
        a = Api(eb.url, token)
        again = a.http.post(
            "/v1/jobs",
            json={"profile": "plain", "argv": argv, "reuse_tag": "x", "secrets": ["API_KEY"]},
            headers={"Idempotency-Key": "k1"},
        )
        assert again.status_code == 200 and again.json()["id"] == first["id"], again.text
    (keys / "secret.key").write_bytes(new + b"\n")  # the old key dropped
    with EmbeddedBroker(cfg) as eb:
        a = Api(eb.url, token)
        job = a.run(argv, secrets=["API_KEY"])
        assert job["exit_code"] == 0 and a.output(job["id"]).strip() == SECRET[::-1]
    assert SecretBox(keys / "secret.key", create=False).key_count == 1
