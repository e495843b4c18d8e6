"""The broker end to end: real HTTP (uvicorn on 127.0.0.1), a real SQLite file (and, where a
test takes ``database_url``, a real PostgreSQL database too), the real LocalRuntime with
bubblewrap sandboxes and the real in-pod agent."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rig import PY, Api, broker_config, tenant_api, wait_for
from stoker.broker.config import BrokerProfile, PolicyConfig
from stoker.broker.embedded import EmbeddedBroker

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) not installed"),
    pytest.mark.timeout(90),
]


@pytest.fixture
def broker(tmp_path: Path, database_url: str) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(broker_config(tmp_path, database_url=database_url)) as eb:
        yield eb


# ----------------------------------------------------------------------------- API layer


def test_a_plain_submit_takes_the_fast_path_and_answers_as_the_route(
    broker: EmbeddedBroker,
) -> None:
    # POST /v1/jobs: a plain request is served by the fast path (FastSubmit), any other by
    # the FastAPI route; the same request either way gets the same answer, refusals included
    assert broker.broker is not None
    (route,) = [
        r
        for r in broker.broker.app.router.routes
        if getattr(r, "path", None) == "/v1/jobs" and "POST" in getattr(r, "methods", ())
    ]
    routed: list[str] = []
    inner = route.app

    async def counting(scope: Any, receive: Any, send: Any) -> None:
        routed.append(scope["path"])
        await inner(scope, receive, send)

    route.app = counting
    a = tenant_api(broker, "a")
    job = {"profile": "plain", "argv": ["python", "-c", "print(3)"], "reuse_tag": "fp"}
    bad_key = {"Idempotency-Key": "k" * 201}
    cases: list[tuple[dict[str, Any], dict[str, Any], dict[str, str], bool]] = [
        (job, {"wait": 30}, {}, True),  # runs; the same key again: the same job, a 200
        (job, {"wait": 30}, {}, True),
        ({**job, "profile": "nope"}, {}, {}, True),  # the route function's own refusal
        ({**job, "argv": []}, {}, {}, False),  # pydantic's: the route's
        (job, {"wait": 301}, {}, False),
        (job, {"wait": "soon"}, {}, False),
        (job, {}, bad_key, False),
        (job, {"other": 1}, {}, False),  # the route ignores it: the same job again
    ]
    answers: dict[str, list[tuple[int, Any]]] = {}
    for way, content_type in (("fast", "application/json"), ("route", "application/JSON")):
        answers[way] = []
        for body, params, headers, plain in cases:
            routed.clear()
            r = a.http.post(
                "/v1/jobs",
                params=params,
                content=json.dumps(body),
                headers={"Content-Type": content_type, "Idempotency-Key": way, **headers},
            )
            assert bool(routed) is (way == "route" or not plain), (way, body, params)
            reply = r.json()
            if r.status_code < 300:
                assert reply["state"] == "finished" and reply["labels"] == {}
                if "wait" in params:  # it waited: the output came with the reply
                    assert base64.b64decode(reply["output"]["stdout"]) == b"3\n"
                reply = {k: v for k, v in reply.items() if k not in _PER_JOB}
            answers[way].append((r.status_code, reply))
    assert [s for s, _ in answers["fast"]] == [201, 200, 422, 422, 422, 422, 422, 200]
    assert answers["fast"] == answers["route"]
    assert [reply.get("field") for _, reply in answers["fast"][2:7]] == [
        "body.profile",
        "body.argv",
        "query.wait",
        "query.wait",
        "header.idempotency-key",
    ]


_PER_JOB = ("id", "submitted", "placed", "started", "exited", "drained", "finished", "committed")
_PER_JOB += ("start_latency_ms", "queue_wait_ms", "pods", "path")


def test_health_ready_and_openapi(broker: EmbeddedBroker) -> None:
    api = Api(broker.url, None)
    assert api.http.get("/v1/health").json()["status"] == "ok"
    assert api.http.get("/v1/ready").status_code == 200
    paths = api.http.get("/openapi.json").json()["paths"]
    for p in ("/v1/jobs", "/v1/jobs/{job_id}/wait", "/v1/jobs/{job_id}/output", "/v1/pods"):
        assert p in paths
    assert "stoker_queue_length" in api.http.get("/metrics").text


def test_authentication_and_tenant_scoping(broker: EmbeddedBroker) -> None:
    anon = Api(broker.url, None)
    r = anon.submit([PY, "-c", "pass"])
    assert r.status_code == 401 and r.json()["field"] == "authorization"
    assert Api(broker.url, "stk_wrong").http.get("/v1/jobs").status_code == 401
    a, b = tenant_api(broker, "a"), tenant_api(broker, "b")
    admin = Api(broker.url, broker.admin_token)
    assert a.http.get("/v1/tenants").status_code == 403  # tenants are the admin's
    assert admin.submit([PY, "-c", "pass"]).status_code == 403  # jobs are a tenant's
    assert admin.http.get("/v1/tenants").json() == ["a", "b"]
    job = a.run([PY, "-c", "print('mine')"])
    jid = job["id"]
    for path in (f"/v1/jobs/{jid}", f"/v1/jobs/{jid}/wait", f"/v1/jobs/{jid}/output"):
        assert b.http.get(path).status_code == 404
    assert b.http.post(f"/v1/jobs/{jid}/cancel").status_code == 404
    assert b.http.get("/v1/jobs").json() == []
    assert b.pods() == []  # a's pod is not b's to see
    assert [j["id"] for j in a.http.get("/v1/jobs").json()] == [jid]
    assert admin.http.get(f"/v1/jobs/{jid}").status_code == 200
    assert [j["id"] for j in admin.http.get("/v1/jobs", params={"tenant": "a"}).json()] == [jid]


def test_bad_input_names_the_field_and_writes_nothing(tmp_path: Path) -> None:
    with EmbeddedBroker(broker_config(tmp_path, max_code_bytes=1000, max_timeout_s=100)) as eb:
        a = tenant_api(eb, "a")
        cases = [
            ({"profile": "nope"}, "body.profile"),
            ({"argv": []}, "body.argv"),
            ({"argv": "python -c pass"}, "body.argv"),
            ({"argv": [""]}, "body.argv"),
            ({"timeout_s": 1000}, "body.timeout_s"),
            ({"timeout_s": -1}, "body.timeout_s"),
            ({"reuse_tag": ""}, "body.reuse_tag"),
            ({"env": {"1BAD": "x"}}, "body.env"),
            ({"code_digest": "0" * 64}, "body.code_digest"),
            ({"workers": 5}, "body.workers"),
        ]
        for override, field in cases:
            body = {"profile": "plain", "argv": [PY, "-c", "pass"], "reuse_tag": "x", **override}
            r = a.http.post("/v1/jobs", json=body)
            assert 400 <= r.status_code < 500, (override, r.text)
            assert r.json()["field"].startswith(field), (override, r.json())
            assert field in r.json()["message"]
        r = a.http.post("/v1/code", content=b"x" * 2000)
        assert r.status_code == 413 and r.json()["field"] == "code"
        r = a.http.post("/v1/code", content=b"not a tar")
        assert r.status_code == 422 and r.json()["field"] == "code"
        admin = Api(eb.url, eb.admin_token)
        r = admin.http.get("/v1/jobs", params={"tenant": "ghost"})
        assert r.status_code == 422 and r.json()["field"] == "query.tenant"
        r = admin.http.post("/v1/tenants", json={"name": "Bad Name"})
        assert r.status_code == 422 and r.json()["field"] == "body.name"
        assert admin.http.post("/v1/tenants", json={"name": "a"}).status_code == 409
        assert a.http.get("/v1/jobs").json() == []
        db = eb.cfg.db_path
    with sqlite3.connect(db) as conn:
        assert conn.execute("select count(*) from jobs").fetchone()[0] == 0
        # the events logged as the broker started: this host's node, and the pods the
        # runtime had alive (none)
        kinds = conn.execute("select kind from core_events").fetchall()
        assert kinds == [("node_added",), ("pods_found",)]


def test_idempotency_key_gives_the_same_job(broker: EmbeddedBroker) -> None:
    a = tenant_api(broker, "a")
    body = {"profile": "plain", "argv": [PY, "-c", "pass"], "reuse_tag": "x"}
    h = {"Idempotency-Key": "k-1"}
    r1 = a.http.post("/v1/jobs", json=body, headers=h)
    r2 = a.http.post("/v1/jobs", json=body, headers=h)
    assert (r1.status_code, r2.status_code) == (201, 200)
    assert r1.json()["id"] == r2.json()["id"]
    b = tenant_api(broker, "b")  # keys live inside their tenant
    assert b.http.post("/v1/jobs", json=body, headers=h).json()["id"] != r1.json()["id"]
    assert len(a.http.get("/v1/jobs").json()) == 1


# ----------------------------------------------------------------------------- pool paths


def test_cold_start_then_warm_hit_with_output_and_exit(broker: EmbeddedBroker) -> None:
    a = tenant_api(broker, "a")
    first = a.run([PY, "-c", "import sys; print('hello'); sys.exit(3)"])
    assert (first["path"], first["exit_code"], first["failure"]) == ("cold", 3, "user_error")
    assert a.output(first["id"]) == "hello\n"
    second = a.run([PY, "-c", "print('again')"])
    assert (second["path"], second["exit_code"]) == ("warm", 0)
    assert second["pods"] == first["pods"]
    assert second["start_latency_ms"] < first["start_latency_ms"]
    metrics = Api(broker.url, None).http.get("/metrics").text
    assert 'stoker_jobs_started_total{job_class="pool",path="warm",profile="plain"} 1.0' in metrics


def test_a_jobs_end_is_recorded_in_steps(broker: EmbeddedBroker) -> None:
    # exited (its process ended), drained (its output read to the end, the pod clean), then
    # finished (the broker took it) and committed (its final row's transaction began): where
    # the time between a job's last line and its caller's answer goes
    a = tenant_api(broker, "a")
    a.run([PY, "-c", "pass"])  # the pod's cold start out of the way
    job = a.run([PY, "-c", "import time; print('x', flush=True); time.sleep(0.3)"])
    steps = [job[k] for k in ("submitted", "started", "exited", "drained", "finished")]
    assert all(isinstance(t, float) for t in steps), job
    assert steps == sorted(steps), job
    # the job's own time is its own step (started is the broker's clock, a moment late)
    assert job["exited"] - job["started"] >= 0.2
    row = a.http.get(f"/v1/jobs/{job['id']}").json()
    assert row["committed"] is not None and row["committed"] >= row["finished"]
    assert {k: row[k] for k in _PER_JOB} == {k: job[k] for k in _PER_JOB} | {
        "committed": row["committed"]
    }


def test_standby_promotion(tmp_path: Path) -> None:
    with EmbeddedBroker(broker_config(tmp_path, gpu_slots=1)) as eb:
        a = tenant_api(eb, "a")
        x = a.run([PY, "-c", "pass"], tag="x")
        assert x["path"] == "cold"
        wait_for(lambda: any(p["state"] == "standby" for p in Api(eb.url, eb.admin_token).pods()))
        y = a.run([PY, "-c", "pass"], tag="y")
        assert y["path"] == "standby" and y["exit_code"] == 0
        assert y["pods"] != x["pods"]


def test_keepalive_expiry(tmp_path: Path) -> None:
    with EmbeddedBroker(broker_config(tmp_path, policies=PolicyConfig(keepalive_s=0.5))) as eb:
        a = tenant_api(eb, "a")
        job = a.run([PY, "-c", "pass"])
        pod = job["pods"][0]
        wait_for(lambda: all(p["id"] != pod for p in a.pods()), 10)
        again = a.run([PY, "-c", "pass"])
        assert again["path"] != "warm" and again["pods"] != job["pods"]


def test_budget_shrinks_under_queueing(tmp_path: Path) -> None:
    cfg = broker_config(
        tmp_path, gpu_slots=1, profiles=[BrokerProfile.simple("plain", standby=False)]
    )
    with EmbeddedBroker(cfg) as eb:
        a, b = tenant_api(eb, "a"), tenant_api(eb, "b")
        held = a.run([PY, "-c", "pass"])
        assert any(p["state"] == "warm" for p in a.pods())
        # b's job finds the only GPU held by a's idle warm pod: it queues, the warm budget
        # falls by what it waits for, and a's pod gives the GPU up
        job = b.run([PY, "-c", "pass"])
        assert job["exit_code"] == 0 and job["path"] == "cold"
        assert all(p["id"] not in held["pods"] for p in a.pods())


def test_isolation_between_callers(tmp_path: Path) -> None:
    # a GPU per caller, no standby: nothing forces (A, x)'s warm pod out before it is reused
    cfg = broker_config(
        tmp_path, gpu_slots=3, profiles=[BrokerProfile.simple("plain", standby=False)]
    )
    with EmbeddedBroker(cfg) as eb:
        _isolation(tenant_api(eb, "a"), tenant_api(eb, "b"))


def _isolation(a: Api, b: Api) -> None:
    leak = (
        "import os, subprocess, pathlib\n"
        "pathlib.Path('/workspace/secret.txt').write_text('a-x')\n"
        "os.environ['LEAKED'] = '1'\n"
        "open('/workspace/.profile', 'a').write('export LEAKED=1\\n')\n"
        "subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
    )
    assert a.run([PY, "-c", leak], tag="x")["exit_code"] == 0
    probe = (
        "import os, pathlib, sys\n"
        "seen = []\n"
        "if pathlib.Path('/workspace/secret.txt').exists(): seen.append('file')\n"
        "if 'LEAKED' in os.environ: seen.append('env')\n"
        "for p in pathlib.Path('/proc').iterdir():\n"
        "    if p.name.isdigit():\n"
        "        try: cmd = (p / 'cmdline').read_bytes()\n"
        "        except OSError: continue\n"
        "        if b'sleep' in cmd: seen.append('process')\n"
        "print(','.join(seen)); sys.exit(1 if seen else 0)\n"
    )
    for api, tag in ((a, "y"), (b, "x")):
        job = api.run([PY, "-c", probe], tag=tag)
        assert job["exit_code"] == 0, api.output(job["id"])
    later = a.run([PY, "-c", "print(open('/workspace/secret.txt').read())"], tag="x")
    assert later["path"] == "warm" and a.output(later["id"]).strip() == "a-x"


def test_cancel_running_job(broker: EmbeddedBroker) -> None:
    a = tenant_api(broker, "a")
    r = a.submit([PY, "-c", "import time; print('up', flush=True); time.sleep(60)"])
    jid = r.json()["id"]
    wait_for(lambda: a.http.get(f"/v1/jobs/{jid}").json()["state"] == "running")
    assert a.http.post(f"/v1/jobs/{jid}/cancel").status_code == 200
    job = a.wait(jid, 20)
    assert job["state"] == "finished" and job["failure"] == "cancelled"


def test_multi_pod_job_gets_consistent_topology(broker: EmbeddedBroker) -> None:
    a = tenant_api(broker, "a")
    code = (
        "import os\n"
        "print(os.environ['RANK'], os.environ['WORLD_SIZE'],"
        " os.environ['MASTER_ADDR'], os.environ['MASTER_PORT'])\n"
    )
    job = a.run([PY, "-c", code], workers=2)
    assert job["exit_code"] == 0 and len(job["pods"]) == 2
    lines = sorted(a.output(job["id"]).split("\n"))[1:]
    ranks = [line.split() for line in lines]
    assert [r[0] for r in ranks] == ["0", "1"]
    assert len({tuple(r[1:]) for r in ranks}) == 1 and ranks[0][1] == "2"


def test_restart_with_running_and_queued_jobs(tmp_path: Path, database_url: str) -> None:
    profiles = [BrokerProfile.simple("plain", standby=False)]
    cfg = broker_config(tmp_path, gpu_slots=1, profiles=profiles, database_url=database_url)
    eb = EmbeddedBroker(cfg, stop_pods=False).start()
    a = tenant_api(eb, "a")
    slow = "import time; print('before', flush=True); time.sleep(2.5); print('after')"
    running = a.submit([PY, "-c", slow], tag="x").json()["id"]
    wait_for(lambda: a.http.get(f"/v1/jobs/{running}").json()["state"] == "running")
    queued = a.submit([PY, "-c", "print('queued ran')"], tag="y").json()["id"]
    assert a.http.get(f"/v1/jobs/{queued}").json()["state"] == "queued"
    token = a.token
    eb.stop(stop_pods=False)  # the broker goes; its pod and the job in it stay

    eb2 = EmbeddedBroker(cfg).start()
    try:
        assert eb2.broker is not None
        assert eb2.broker.recovery["adopted"] == 1 and eb2.broker.recovery["replayed"] > 0
        a2 = Api(eb2.url, token)
        first = a2.wait(running, 30)
        assert (first["state"], first["exit_code"]) == ("finished", 0)
        assert "after" in a2.output(running)
        second = a2.wait(queued, 60)
        assert second["exit_code"] == 0 and "queued ran" in a2.output(queued), second
    finally:
        eb2.stop()


def test_restart_fails_a_lost_pod_with_a_typed_reason(tmp_path: Path, database_url: str) -> None:
    profiles = [BrokerProfile.simple("plain", standby=False)]
    cfg = broker_config(tmp_path, gpu_slots=1, profiles=profiles, database_url=database_url)
    eb = EmbeddedBroker(cfg, stop_pods=False).start()
    a = tenant_api(eb, "a")
    jid = a.submit([PY, "-c", "import time; time.sleep(30)"]).json()["id"]
    wait_for(lambda: a.http.get(f"/v1/jobs/{jid}").json()["state"] == "running")
    token = a.token
    eb.stop(stop_pods=True)  # the pod dies as the broker goes: no broker hears its PodDown
    with EmbeddedBroker(cfg) as eb2:
        assert eb2.broker is not None and eb2.broker.recovery["lost"] == 1
        job = Api(eb2.url, token).wait(jid, 10)
        assert job["state"] == "finished" and job["failure"] == "pod_died"


def test_a_restart_with_fewer_gpus_sets_aside_what_no_longer_fits(
    tmp_path: Path, database_url: str
) -> None:
    """This host's node is logged as the core's NodeAdded, so a broker restarted with fewer
    GPUs replays the cluster each past event saw and meets the new one as the node's change:
    a queued job that no longer fits waits aside, still queued, with the reason on the API
    (not cancelled: the host's GPUs may come back, and its caller can cancel it), new jobs
    that fit run, and once the GPUs are back the set-aside jobs run too."""
    two = broker_config(tmp_path, gpu_slots=2, database_url=database_url)
    one = broker_config(tmp_path, gpu_slots=1, database_url=database_url)
    with EmbeddedBroker(two) as eb:
        a = tenant_api(eb, "a")
        token = a.token
        hold = a.submit([PY, "-c", "import time; time.sleep(60)"], job_class="hp", gpus=2)
        hold_id = hold.json()["id"]
        wait_for(lambda: a.http.get(f"/v1/jobs/{hold_id}").json()["state"] == "running")
        hp = a.submit([PY, "-c", "print('hp ran')"], job_class="hp", gpus=2).json()["id"]
        gang = a.submit([PY, "-c", "print('gang ran')"], workers=2).json()["id"]
        # queued, each told the room it waits for (every card is the hold's)
        for jid, says in ((hp, "1 worker(s) of 2 GPU"), (gang, "2 worker(s) of 0.9 GPU")):
            row = a.http.get(f"/v1/jobs/{jid}").json()
            assert row["state"] == "queued", row
            assert row["waiting_reason"] == f"no room on any for {says}: 0 of 2 GPUs free"
    # its pods stopped with it: the job that ran ends pod_died on the restart
    with EmbeddedBroker(one) as eb:
        a = Api(eb.url, token)
        assert a.wait(hold_id, 10)["failure"] == "pod_died"
        for jid, says in ((hp, "largest node of GPU pool"), (gang, "2 workers")):
            row = a.http.get(f"/v1/jobs/{jid}").json()
            assert row["state"] == "queued", row
            assert (
                row["waiting_reason"].startswith("no node fits: ")
                and says in (row["waiting_reason"])
            ), row
        listed = {r["id"]: r["waiting_reason"] for r in a.http.get("/v1/jobs").json()}
        assert listed[hp] and listed[gang] and listed[hold_id] is None
        # the CLI: a line per job waiting aside, under the table
        from typer.testing import CliRunner

        from stoker.cli.main import app

        env = {"STOKER_URL": eb.url, "STOKER_TOKEN": token, "COLUMNS": "200"}
        shown = CliRunner().invoke(app, ["ps", "--wide"], env=env).stdout
        assert f"{hp} waits: {listed[hp]}" in shown, shown
        small = a.run([PY, "-c", "print('small ran')"], tag="s")
        assert small["exit_code"] == 0 and a.output(small["id"]) == "small ran\n"
        assert small["pods"] and eb.broker is not None and eb.broker.loop is not None
        assert eb.broker.loop.core.pods[small["pods"][0]].gpus == ["vgpu0"]
    with EmbeddedBroker(two) as eb:
        a = Api(eb.url, token)
        for jid, says in ((hp, "hp ran"), (gang, "gang ran")):
            row = a.wait(jid, 60)
            assert (row["exit_code"], row["waiting_reason"]) == (0, None), row
            assert says in a.output(jid)


# a job that says which GPUs its pod was given, then waits until the test lets it end (a
# file in its workspace), so it outlives broker restarts without racing a sleep
_GATED = (
    "import os, pathlib, time\n"
    "print(os.environ['STOKER_GPUS'], flush=True)\n"
    "while not pathlib.Path('/workspace/go').exists(): time.sleep(0.05)\n"
    "print('after', os.environ['STOKER_GPUS'])\n"
)


def _release(eb: EmbeddedBroker, pod: str) -> None:
    """Let the gated job in ``pod`` end (the pod's workspace, as the host sees it)."""
    assert eb.broker is not None and eb.broker.loop is not None
    workspace = eb.broker.loop.runtime.pod_info(pod).workspace  # type: ignore[attr-defined]
    (workspace / "go").write_text("")


def _runs(eb: EmbeddedBroker, pod: str) -> bool:
    """Whether the broker's runtime has ``pod`` live (not stopped, not stopping)."""
    assert eb.broker is not None and eb.broker.loop is not None
    try:
        eb.broker.loop.runtime.pod_info(pod)  # type: ignore[attr-defined]
    except KeyError:
        return False
    return True


def test_a_restart_with_another_gpu_set_changes_the_node_in_place(
    tmp_path: Path, database_url: str
) -> None:
    """A broker restarted with other GPUs meets them as its node's change in place
    (NodeChanged): the pods on GPUs still there are adopted and their jobs run on, on the
    GPUs they were bound to and no other; new GPUs take work at once; a restart that takes
    a GPU away fails only the pod on it (its job pod_died, the pod stopped)."""
    from leaks import leftovers

    cfgs = {n: broker_config(tmp_path, gpu_slots=n, database_url=database_url) for n in (1, 2, 3)}
    eb = EmbeddedBroker(cfgs[2], stop_pods=False).start()
    a = tenant_api(eb, "a")
    token = a.token
    gated = [a.submit([PY, "-c", _GATED], job_class="hp", gpus=1).json()["id"] for _ in "01"]
    for jid in gated:
        wait_for(lambda jid=jid: a.http.get(f"/v1/jobs/{jid}").json()["state"] == "running")
    pod = {jid: a.http.get(f"/v1/jobs/{jid}").json()["pods"][0] for jid in gated}
    assert eb.broker is not None and eb.broker.loop is not None
    gpus = {jid: eb.broker.loop.core.pods[pod[jid]].gpus for jid in gated}
    assert sorted(gpus.values()) == [["vgpu0"], ["vgpu1"]]
    on0, on1 = sorted(gated, key=lambda j: gpus[j])
    waits = a.submit([PY, "-c", "print('waited')"], job_class="hp", gpus=2).json()["id"]
    eb.stop(stop_pods=False)

    # one GPU more: nothing is lost, the jobs run on where they were, the new GPU runs work
    eb = EmbeddedBroker(cfgs[3], stop_pods=False).start()
    try:
        assert eb.broker is not None and eb.broker.loop is not None
        rec = eb.broker.recovery
        assert (rec["adopted"], rec["lost"], rec["jobs_lost"], rec["orphans_stopped"]) == (
            2,
            0,
            0,
            0,
        ), rec
        a = Api(eb.url, token)
        sched = eb.broker.loop
        for jid in gated:
            assert a.http.get(f"/v1/jobs/{jid}").json()["state"] == "running"
            assert sched.core.pods[pod[jid]].gpus == gpus[jid]
            info = sched.runtime.pod_info(pod[jid])  # type: ignore[attr-defined]
            assert list(info.gpus) == gpus[jid]  # the pod was given no GPU it lacked
        new = a.run([PY, "-c", "import os; print(os.environ['STOKER_GPUS'])"], job_class="hp")
        assert (new["exit_code"], a.output(new["id"])) == (0, "vgpu2\n"), new
        assert a.http.get(f"/v1/jobs/{waits}").json()["state"] == "queued"
    finally:
        eb.stop(stop_pods=False)

    # down to one GPU: the job on vgpu1 loses its pod, the one on vgpu0 runs to its end
    with EmbeddedBroker(cfgs[1]) as eb:
        assert eb.broker is not None and eb.broker.loop is not None
        rec = eb.broker.recovery
        assert (rec["adopted"], rec["lost"], rec["jobs_lost"]) == (1, 0, 0), rec
        a = Api(eb.url, token)
        lost = a.wait(on1, 10)
        assert (lost["state"], lost["failure"]) == ("finished", "pod_died"), lost
        wait_for(lambda: not _runs(eb, pod[on1]))  # its pod stopped
        _release(eb, pod[on0])
        kept = a.wait(on0, 30)
        assert (kept["exit_code"], kept["failure"]) == (0, None), kept
        assert a.output(on0) == "vgpu0\nafter vgpu0\n"
        row = a.http.get(f"/v1/jobs/{waits}").json()
        assert row["state"] == "queued" and row["waiting_reason"].startswith("no node fits")
    assert not leftovers(tmp_path), leftovers(tmp_path)


def test_a_store_written_before_the_node_was_logged_replays_on_its_node(
    tmp_path: Path, database_url: str
) -> None:
    """A store from before this host's node was logged (no node event in it) replays as if
    the node of the first broker after the change had been there from the start, and that
    broker logs it: a later restart with fewer GPUs then sets aside what no longer fits
    (taking the config's node for the old events then, the replay would refuse them)."""
    import sqlalchemy as sa

    from stoker.broker.store import Store, core_events

    two = broker_config(tmp_path, gpu_slots=2, database_url=database_url)
    with EmbeddedBroker(two) as eb:
        a = tenant_api(eb, "a")
        token = a.token
        done = a.run([PY, "-c", "print('ran')"], job_class="hp", gpus=2)
        assert done["exit_code"] == 0, done
    store = Store(two.store_url)
    try:
        with store.transaction() as conn:  # as an older broker wrote it
            conn.execute(sa.delete(core_events).where(core_events.c.kind == "node_added"))
    finally:
        store.close()
    with EmbeddedBroker(two) as eb:
        a = Api(eb.url, token)
        assert a.http.get(f"/v1/jobs/{done['id']}").json()["exit_code"] == 0
        hold = a.submit([PY, "-c", "import time; time.sleep(60)"], job_class="hp", gpus=2)
        hold_id = hold.json()["id"]
        wait_for(lambda: a.http.get(f"/v1/jobs/{hold_id}").json()["state"] == "running")
        queued = a.submit([PY, "-c", "print('queued ran')"], job_class="hp", gpus=2).json()["id"]
    with EmbeddedBroker(broker_config(tmp_path, gpu_slots=1, database_url=database_url)) as eb:
        a = Api(eb.url, token)
        assert a.wait(hold_id, 10)["failure"] == "pod_died"
        row = a.http.get(f"/v1/jobs/{queued}").json()
        assert row["state"] == "queued" and row["waiting_reason"].startswith("no node fits")


def test_a_store_written_before_the_node_was_logged_replays_on_a_host_that_shrank(
    tmp_path: Path, database_url: str
) -> None:
    """A store from before this host's node was logged, first opened by a broker with fewer
    GPUs than the one that wrote it (the upgrade and the shrink in one restart): the replay
    takes the node the log implies (the smallest from this host's naming on which the log
    replays and agrees with the stored jobs), logs it, then meets the shrink as the node's
    change in place: the job on the GPU still there runs on, the one whose pod held the
    lost GPU ends pod_died, a queued job that no longer fits waits aside."""
    import sqlalchemy as sa

    from leaks import leftovers
    from stoker.broker.store import Store, core_events

    two = broker_config(tmp_path, gpu_slots=2, database_url=database_url)
    eb = EmbeddedBroker(two, stop_pods=False).start()
    a = tenant_api(eb, "a")
    token = a.token
    assert a.run([PY, "-c", "print('ran')"], job_class="hp", gpus=2)["exit_code"] == 0
    gated = [a.submit([PY, "-c", _GATED], job_class="hp", gpus=1).json()["id"] for _ in "01"]
    for jid in gated:
        wait_for(lambda jid=jid: a.http.get(f"/v1/jobs/{jid}").json()["state"] == "running")
    assert eb.broker is not None and eb.broker.loop is not None
    pods = eb.broker.loop.core.pods
    pod = {jid: a.http.get(f"/v1/jobs/{jid}").json()["pods"][0] for jid in gated}
    on0, on1 = sorted(gated, key=lambda j: pods[pod[j]].gpus)
    queued = a.submit([PY, "-c", "print('queued ran')"], job_class="hp", gpus=2).json()["id"]
    eb.stop(stop_pods=False)
    store = Store(two.store_url)
    try:
        with store.transaction() as conn:  # as an older broker wrote it
            conn.execute(sa.delete(core_events).where(core_events.c.kind == "node_added"))
    finally:
        store.close()
    with EmbeddedBroker(broker_config(tmp_path, gpu_slots=1, database_url=database_url)) as eb:
        assert eb.broker is not None and eb.broker.loop is not None
        a = Api(eb.url, token)
        lost = a.wait(on1, 10)
        assert (lost["state"], lost["failure"]) == ("finished", "pod_died"), lost
        wait_for(lambda: not _runs(eb, pod[on1]))
        _release(eb, pod[on0])
        kept = a.wait(on0, 30)
        assert (kept["exit_code"], a.output(on0)) == (0, "vgpu0\nafter vgpu0\n"), kept
        row = a.http.get(f"/v1/jobs/{queued}").json()
        assert row["state"] == "queued" and row["waiting_reason"].startswith("no node fits")
        db = eb.cfg
    # the node the replay took is logged at the head of what that broker wrote, then the
    # shrink as its change
    store = Store(db.store_url)
    try:
        kinds = [(e.kind, e.data.get("gpu_ids")) for e in store.events() if "node" in e.kind]
    finally:
        store.close()
    assert kinds == [("node_added", ["vgpu0", "vgpu1"]), ("node_changed", ["vgpu0"])], kinds
    assert not leftovers(tmp_path), leftovers(tmp_path)


def test_a_close_whose_commit_fails_still_stops_the_pods(tmp_path: Path) -> None:
    """A broker's close commits what its loop last wrote before it stops the pods; a
    commit that fails then (the store busy or gone) must not skip the stop: the error is
    the close's to report, the pods are its to stop all the same."""
    import sqlalchemy as sa

    from leaks import leftovers

    eb = EmbeddedBroker(broker_config(tmp_path, gpu_slots=1)).start()
    a = tenant_api(eb, "a")
    assert a.run([PY, "-c", "pass"])["exit_code"] == 0  # its pod stays warm
    assert eb.broker is not None and eb.broker.loop is not None
    sched = eb.broker.loop
    assert any(p.state.value == "warm" for p in sched.core.pods.values())

    def fail(store: object) -> None:
        raise sa.exc.OperationalError("COMMIT", {}, Exception("database is locked"))

    sched._batch.commit = fail  # type: ignore[method-assign]
    sched._batch.event(sched._now, "tick", {})  # something left to commit on close
    eb.stop()
    assert not leftovers(tmp_path), leftovers(tmp_path)


def test_a_start_that_fails_halfway_stops_the_pods_it_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker whose start fails after its loop started pods (a profile's spare pod) is
    closed by its lifespan all the same: no pod, store or lock outlives the failed start."""
    from leaks import leftovers
    from stoker.broker.dashboard import Dashboard

    started: list[bool] = []

    async def fail(self: Dashboard) -> None:
        sched = self.broker.loop
        assert sched is not None
        for _ in range(2000):  # the spare pod is up: a start that had pods fails now
            # (the profile stages standbys, so its spare is a standby pod, not a warm one)
            if any(p.state.value in ("warm", "standby") for p in sched.core.pods.values()):
                break
            await asyncio.sleep(0.01)
        started.append(bool(sched.core.pods))
        raise OSError("the dashboard could not start")

    monkeypatch.setattr(Dashboard, "start", fail)
    profiles = [BrokerProfile.simple("plain", min_warm=1)]
    cfg = broker_config(tmp_path, gpu_slots=1, profiles=profiles)
    with pytest.raises(RuntimeError, match="did not start"):
        EmbeddedBroker(cfg).start()
    assert started == [True]
    assert not leftovers(tmp_path), leftovers(tmp_path)


def test_reads_answer_what_is_stored_and_a_wait_returns_once_the_end_is(
    broker: EmbeddedBroker,
) -> None:
    # the loop commits what an event changed at its next turn (one transaction for all); a
    # read in between (a get, a list) answers what is stored, never a finished job that is
    # not, and never forces a commit; a wait returns the job finished once that commit is made
    import asyncio

    from stoker.broker.loop import JobRequest

    a = tenant_api(broker, "a")
    a.run(["true"])  # a warm pod for the caller
    assert broker.broker is not None and broker._loop is not None
    sched = broker.broker.loop
    assert sched is not None

    async def race() -> tuple[list[dict[str, Any] | None], bool, dict[str, Any] | None]:
        # the submit is committed (and its bind carried out) before it returns
        row, _ = await sched.submit("a", JobRequest("plain", ("true",), "x"), None)
        held = sched._schedule_flush
        sched._schedule_flush = lambda: None  # hold the loop's commits back: the window
        if sched._flush_handle is not None:  # a lazy commit pending (the job running)
            sched._flush_handle.cancel()
            sched._flush_handle = None
        try:
            while row["id"] in sched._requests:  # until the core has finished it
                await asyncio.sleep(0.001)
            listed = [r for r in sched.list_jobs("a", (), 100, {}) if r["id"] == row["id"]]
            seen = [sched.job(row["id"]), *listed, sched.store.get_job(row["id"])]
            waiter = asyncio.ensure_future(sched.wait(row["id"], 10))
            await asyncio.sleep(0.05)
            early = waiter.done()
        finally:
            sched._schedule_flush = held
        sched._flush()
        return seen, early, await waiter

    seen, early, waited = asyncio.run_coroutine_threadsafe(race(), broker._loop).result(30)
    assert len(seen) == 3 and all(r is not None and r["state"] != "finished" for r in seen), seen
    assert not early  # the wait went on until the end was stored
    assert waited is not None and waited["state"] == "finished" and waited["exit_code"] == 0
    assert a.http.get(f"/v1/jobs/{waited['id']}").json()["exit_code"] == 0


def _held(eb: EmbeddedBroker) -> dict[str, int]:
    """What the broker's loop holds per job or pod, as its /metrics says, and the pods its
    runtime still has (the sandboxes on disk)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = Api(eb.url, eb.admin_token).http.get("/metrics").text
    (fam,) = [
        f for f in text_string_to_metric_families(text) if f.name == "stoker_broker_held_entries"
    ]
    held = {s.labels["map"]: int(s.value) for s in fam.samples}
    assert "core.jobs" in held and "decision_log.live" in held, held
    return {**held, "runtime.pods": len(list((eb.cfg.runtime_dir / "pods").glob("pod-*")))}


def test_finished_jobs_and_gone_pods_leave_the_brokers_memory(tmp_path: Path) -> None:
    """A long-running broker holds what is live, not what ran: once its jobs finished and its
    pods went (keep-alive), the core and the loop's per-job and per-pod maps are empty, and
    every finished job still reads in full from the store, also after a restart."""
    profiles = [BrokerProfile.simple("plain", standby=False)]  # no pod outlives its keep-alive
    cfg = broker_config(tmp_path, policies=PolicyConfig(keepalive_s=0.5), profiles=profiles)
    jobs: dict[str, Api] = {}
    with EmbeddedBroker(cfg) as eb:
        a, b = tenant_api(eb, "a"), tenant_api(eb, "b")
        for i in range(3):
            for api, tag in ((a, "x"), (b, "y"), (b, f"tag{i}")):
                r = api.submit([PY, "-c", f"print({i})"], tag)
                assert r.status_code == 201, r.text
                jobs[r.json()["id"]] = api
        slow = a.submit([PY, "-c", "import time; time.sleep(30)"], "x").json()["id"]
        a.http.post(f"/v1/jobs/{slow}/cancel").raise_for_status()
        jobs[slow] = a
        for jid, api in jobs.items():
            assert api.wait(jid)["state"] == "finished"
            assert api.http.get(f"/v1/jobs/{jid}/output", params={"follow": True}).is_success
        wait_for(lambda: not a.pods() and not b.pods(), 30)
        try:
            wait_for(lambda: not any(_held(eb).values()), 10)
        except AssertionError:
            raise AssertionError(f"still held: {_held(eb)}") from None
        for jid, api in jobs.items():
            row = api.http.get(f"/v1/jobs/{jid}").json()
            assert row["state"] == "finished", row
            assert row["failure"] == "cancelled" if jid == slow else row["exit_code"] == 0, row
    with EmbeddedBroker(cfg) as eb:  # the replayed core forgets as the live one did
        assert eb.broker is not None and eb.broker.recovery["replayed"] > 0
        held = _held(eb)
        assert not any(held.values()), held
        for jid, api in jobs.items():
            again = Api(eb.url, api.token)
            assert again.wait(jid)["state"] == "finished"
            assert jid == slow or again.output(jid).strip() in {"0", "1", "2"}


def test_submits_of_one_turn_share_one_commit_and_run_only_once_stored(
    broker: EmbeddedBroker,
) -> None:
    # group commit: the submits the loop takes in one turn land in one transaction, a key
    # repeated inside that turn gives the same job, and no runtime call is made for a job
    # before the transaction that stores it has committed
    import asyncio

    import sqlalchemy as sa

    from stoker.broker.loop import JobRequest

    a = tenant_api(broker, "a")
    a.run(["true"])  # a warm pod for the caller
    assert broker.broker is not None and broker._loop is not None
    sched = broker.broker.loop
    engine = sched.store.engine
    commits: list[int] = []
    bound_unstored: list[str] = []
    bind = sched.runtime.bind

    async def checked_bind(pod: str, binding: Any) -> None:
        if sched.store.get_job(binding.job) is None:
            bound_unstored.append(binding.job)
        await bind(pod, binding)

    def count(_conn: Any) -> None:
        commits.append(1)

    async def burst() -> list[tuple[dict[str, Any], bool]]:
        sched.runtime.bind = checked_bind
        sa.event.listen(engine, "commit", count)
        try:
            req = JobRequest("plain", ("true",), "x")
            keys = ["k1", "k2", "k3", "k1", None, None]
            return await asyncio.gather(*(sched.submit("a", req, k) for k in keys))
        finally:
            sa.event.remove(engine, "commit", count)

    out = asyncio.run_coroutine_threadsafe(burst(), broker._loop).result(30)
    assert len(commits) == 1, commits
    ids = [row["id"] for row, _ in out]
    assert ids[0] == ids[3] and [c for _, c in out] == [True, True, True, False, True, True]
    assert len(set(ids)) == 5
    for jid in set(ids):
        assert a.wait(jid, 30)["exit_code"] == 0
    sched.runtime.bind = bind
    assert bound_unstored == []


def test_a_warm_pod_imports_a_callers_deps_once(tmp_path: Path) -> None:
    # the first job of a caller's deps imports them itself; the pod then keeps them imported
    # (its deps layer), so the caller's later jobs of those deps never import them again;
    # another caller's pod never has them before its own first job
    from runtime_rig import IMPORT_COUNTER, import_count, tiny_wheel

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    name = f"stokercount{uuid.uuid4().hex[:6]}"
    tiny_wheel(wheels, name, "", init=IMPORT_COUNTER)
    count = [PY, "-c", import_count(name)]
    with EmbeddedBroker(broker_config(tmp_path, find_links=(wheels,), no_index=True)) as eb:
        a, b = tenant_api(eb, "a"), tenant_api(eb, "b")
        jobs = [a.run(count, deps=[name]) for _ in range(4)]
        assert [j["exit_code"] for j in jobs] == [0] * 4
        assert len({tuple(j["pods"]) for j in jobs}) == 1  # one warm pod
        assert [a.output(j["id"]) for j in jobs] == ["1\n", "2\n", "2\n", "2\n"]
        other = b.run(count, deps=[name], tag="y")
        assert other["pods"] != jobs[0]["pods"] and b.output(other["id"]) == "1\n"
