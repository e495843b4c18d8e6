"""Metrics, the decision log and the dashboard's access rules, against a real broker
(uvicorn on 127.0.0.1, SQLite file, bubblewrap sandboxes) through the real HTTP API."""

from __future__ import annotations

import json
import re
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from api_rig import wait_finished
from rig import Api, broker_config, tenant_api
from stoker.broker.config import PolicyConfig
from stoker.broker.embedded import EmbeddedBroker
from stoker.broker.events_log import outcome
from stoker.broker.metrics import BrokerGauges, BrokerMetrics
from stoker.cli.main import app

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) not installed"),
    pytest.mark.timeout(120),
]

GRAFANA = Path(__file__).parent.parent / "deploy" / "grafana" / "stoker.json"


def _api(eb: EmbeddedBroker, token: str | None) -> httpx.Client:
    return Api(eb.url, token).http


def _tenant(eb: EmbeddedBroker, name: str) -> tuple[httpx.Client, str]:
    api = tenant_api(eb, name)
    return api.http, str(api.token)


def _submit(api: httpx.Client, tag: str, code: str = "pass") -> str:
    body = {"profile": "plain", "argv": ["python", "-c", code], "reuse_tag": tag}
    r = api.post("/v1/jobs", json=body)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _running(admin: httpx.Client, job_id: str, timeout_s: float = 30.0) -> None:
    """Wait until the job's process runs."""
    deadline = time.monotonic() + timeout_s
    while admin.get(f"/v1/jobs/{job_id}").json()["state"] != "running":
        assert time.monotonic() < deadline, f"job {job_id} did not start"
        time.sleep(0.05)


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def _by(samples: list[tuple[dict[str, str], float]], *keys: str) -> Counter[tuple[str, ...]]:
    c: Counter[tuple[str, ...]] = Counter()
    for labels, value in samples:
        c[tuple(labels[k] for k in keys)] += int(value)
    return +c


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(broker_config(tmp_path)) as eb:
        yield eb


def _settled_pods(admin: httpx.Client) -> list[dict[str, Any]]:
    """The pods once none is between states (two equal reads, nothing starting/stopping)."""
    prev = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pods = admin.get("/v1/pods").json()
        states = sorted((p["id"], p["state"]) for p in pods)
        moving = {"starting", "stopping", "recycling"} & {s for _, s in states}
        if states == prev and not moving:
            return list(pods)
        prev = states
        time.sleep(0.2)
    raise AssertionError(f"pods did not settle: {prev}")


def test_metrics_equal_what_the_api_reports(broker: EmbeddedBroker) -> None:
    admin = _api(broker, broker.admin_token)
    a, _ = _tenant(broker, "a")
    b, _ = _tenant(broker, "b")
    # both GPUs busy: a third job waits in the queue and is cancelled there; the sleepers
    # are cancelled while they run
    sleepers = [
        _submit(a, "s1", "import time; time.sleep(60)"),
        _submit(b, "s2", "import time; time.sleep(60)"),
    ]
    for j in sleepers:
        _running(admin, j)
    queued = _submit(a, "s3")
    assert admin.get(f"/v1/jobs/{queued}").json()["state"] == "queued"
    for j in (queued, *sleepers):
        assert admin.post(f"/v1/jobs/{j}/cancel").status_code == 200
        wait_finished(admin, j)
    # the agent loop: a cold start, then warm hits; another caller; a failing job
    for api, tag, code in [
        (a, "x", "pass"),
        (a, "x", "pass"),
        (a, "x", "pass"),
        (b, "y", "pass"),
        (b, "y", "raise SystemExit(3)"),
        (a, "x", "pass"),
    ]:
        wait_finished(api, _submit(api, tag, code))

    jobs = admin.get("/v1/jobs", params={"limit": 1000}).json()
    states = [(j["id"], j["state"], j["requeues"], j["requeue_reason"]) for j in jobs]
    assert len(jobs) == 9 and all(s[1] == "finished" for s in states), states
    pods = _settled_pods(admin)
    m = _samples(admin.get("/metrics").text)

    started = Counter((j["path"],) for j in jobs if j["started"] is not None)
    assert _by(m["stoker_jobs_started_total"], "path") == started
    assert _by(m["stoker_job_start_seconds_count"], "path") == started
    finished = Counter((j["path"] or "none", outcome(j["exit_code"], j["failure"])) for j in jobs)
    assert _by(m["stoker_jobs_finished_total"], "path", "outcome") == finished
    assert (
        finished[("none", "cancelled")] == 1
        and sum(n for (_, o), n in finished.items() if o == "cancelled") == 3
    )
    assert finished[("warm", "user_error")] == 1
    placed = sum(1 for j in jobs if j["path"] is not None)
    assert _by(m["stoker_job_queue_wait_seconds_count"], "profile") == Counter({("plain",): placed})
    assert _by(m["stoker_pods"], "state") == Counter((p["state"],) for p in pods)
    assert _by(m["stoker_queue_length"], "profile") == Counter()  # nothing waits
    idle = {lab["state"]: v for lab, v in m["stoker_idle_gpus"]}
    assert idle["warm"] == pytest.approx(0.9 * sum(p["state"] == "warm" for p in pods))
    assert idle["standby"] == pytest.approx(0.1 * sum(p["state"] == "standby" for p in pods))
    # every pod end the log tells of (stopped, recycled, failed) is counted under its
    # reason, once per pod, and nothing else
    events = admin.get("/v1/events", params={"limit": 1000}).json()
    ends = [e for e in events if e["kind"] in ("pod.stopped", "pod.recycled", "pod.failed")]
    assert len({e["pod"] for e in ends}) == len(ends), ends
    assert all(
        e["new_pod"] and e["reason"] == "recycle" for e in ends if e["kind"] == "pod.recycled"
    )
    stops = Counter((e["reason"],) for e in ends)
    assert _by(m.get("stoker_pod_stops_total", []), "reason") == stops
    # bounded labels: no tenant, token or reuse tag in any label
    labels = {k for series in m.values() for lab, _ in series for k in lab}
    assert labels <= {
        "profile",
        "path",
        "outcome",
        "state",
        "reason",
        "gpu_model",
        "job_class",
        "map",  # the loop's own maps, a fixed set
        "le",
    }
    text = admin.get("/metrics").text
    for secret in ('"a"', '"b"', '"x"', '"y"', "stk_"):
        assert secret not in text


def test_events_say_why_and_stay_in_their_tenant(broker: EmbeddedBroker) -> None:
    admin = _api(broker, broker.admin_token)
    a, a_token = _tenant(broker, "a")
    b, _ = _tenant(broker, "b")
    first = wait_finished(a, _submit(a, "loop"))
    second = wait_finished(a, _submit(a, "loop"))
    other = wait_finished(b, _submit(b, "mine"))
    assert (first["path"], second["path"]) == ("cold", "warm")

    ev = a.get("/v1/events", params={"job": first["id"]}).json()
    assert [e["kind"] for e in ev] == ["job.submitted", "job.placed", "job.started", "job.finished"]
    placed = ev[1]
    assert placed["path"] == "cold"
    assert placed["reasons"][:2] == ["no_warm_pod", "new_reuse_tag"]
    assert "cold start" in placed["message"] and "no pod has run its reuse tag" in placed["message"]
    ev = a.get("/v1/events", params={"job": second["id"]}).json()
    assert ev[1]["reasons"] == ["warm_pod_of_tag"] and "warm hit" in ev[1]["message"]

    # a tenant sees only its own; another tenant's job is a 404, as on /v1/jobs
    assert {e["tenant"] for e in a.get("/v1/events").json()} == {"a"}
    assert {e["tenant"] for e in b.get("/v1/events").json()} == {"b"}
    r = b.get("/v1/events", params={"job": first["id"]})
    assert r.status_code == 404 and r.json()["field"] == "query.job"
    assert _api(broker, None).get("/v1/events").status_code == 401
    everything = admin.get("/v1/events", params={"limit": 1000}).json()
    assert {"a", "b"} <= {e.get("tenant") for e in everything}
    seqs = [e["seq"] for e in everything]
    assert seqs == sorted(seqs)
    after = a.get("/v1/events", params={"after": seqs[-3]}).json()
    assert all(e["seq"] > seqs[-3] for e in after)

    # the structured log: one JSON object per line, the same events, never a token
    lines = (broker.cfg.data_dir / "events.jsonl").read_text().splitlines()
    logged = [json.loads(line) for line in lines]
    assert [e["seq"] for e in logged] == seqs
    assert a_token not in "\n".join(lines) and broker.admin_token not in "\n".join(lines)

    # the CLI answers the same question
    env = {"STOKER_URL": broker.url, "STOKER_TOKEN": a_token, "COLUMNS": "200"}
    res = CliRunner().invoke(app, ["events", "--job", first["id"]], env=env)
    assert res.exit_code == 0 and "cold start" in res.stdout, res.output
    res = CliRunner().invoke(app, ["events", "--job", other["id"]], env=env)
    assert res.exit_code != 0 and "no job" in res.output  # another tenant's is as absent


def test_events_survive_a_restart(tmp_path: Path) -> None:
    cfg = broker_config(tmp_path)
    with EmbeddedBroker(cfg) as eb:
        a, token = _tenant(eb, "a")
        job = wait_finished(a, _submit(a, "t"))
        before = a.get("/v1/events", params={"job": job["id"]}).json()
    with EmbeddedBroker(cfg) as eb:
        a = _api(eb, token)
        assert a.get("/v1/events", params={"job": job["id"]}).json() == before
        nxt = wait_finished(a, _submit(a, "t"))
        ev = a.get("/v1/events", params={"job": nxt["id"]}).json()
        assert ev[0]["seq"] > before[-1]["seq"]
        # the first broker stopped its pods on the way out, and logged why: the next
        # one says so when the tag starts cold
        assert nxt["path"] in ("cold", "standby")
        placed = next(e for e in ev if e["kind"] == "job.placed")
        assert "last_pod_shutdown" in placed["reasons"], placed
        assert f"its last pod {job['pods'][0]} was stopped" in placed["message"]


def test_dashboard_needs_the_admin_or_viewer_token(broker: EmbeddedBroker) -> None:
    _, tenant_token = _tenant(broker, "a")
    viewer = (broker.cfg.data_dir / "viewer.token").read_text().strip()
    assert (broker.cfg.data_dir / "viewer.token").stat().st_mode & 0o777 == 0o600
    anon = httpx.Client(base_url=broker.url, timeout=30)
    page = anon.get("/")
    assert page.status_code == 200 and 'action="/login"' in page.text
    assert anon.get("/dashboard/state").status_code == 401

    def login(token: str) -> httpx.Response:
        # as the browser does: the form's CSRF token (its cookie came with the form)
        csrf = anon.get("/").text.split('name="csrf" value="')[1].split('"')[0]
        return anon.post("/login", data={"token": token, "csrf": csrf})

    assert login(tenant_token).status_code == 401
    assert login("stk_nope").status_code == 401
    assert "stoker_session" not in anon.cookies
    r = login(viewer)
    assert r.status_code == 303 and "httponly" in r.headers["set-cookie"].lower()
    assert "samesite=strict" in r.headers["set-cookie"].lower()
    assert viewer not in r.headers["set-cookie"]
    state = anon.get("/dashboard/state").json()
    gpu_pools = _api(broker, broker.admin_token).get("/v1/pools").json()
    assert state["capacity_gpus"] == 2.0
    assert [{k: v for k, v in p.items() if k != "history"} for p in state["gpu_pools"]] == gpu_pools
    assert 'id="kpi-hit-rate"' in anon.get("/").text
    # a forged or tampered session is refused
    forged = httpx.Client(base_url=broker.url, cookies={"stoker_session": "admin.9999999999.00"})
    assert forged.get("/dashboard/state").status_code == 401
    # bearer works for scripts; the static files are served from the package
    bearer = _api(broker, broker.admin_token).get("/dashboard/state")
    assert bearer.status_code == 200
    assert anon.get("/static/dashboard.js").status_code == 200
    anon.post("/logout")
    assert anon.get("/dashboard/state").status_code == 401


def test_grafana_dashboard_uses_only_exported_metrics() -> None:
    dash = json.loads(GRAFANA.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    used = {
        re.sub(r"_(bucket|count|sum)$", "", n) for e in exprs for n in re.findall(r"stoker_\w+", e)
    }
    m = BrokerMetrics()
    m.watch(BrokerGauges)
    exported = set(re.findall(r"^# HELP (\S+)", m.render().decode(), re.M))
    assert used and used <= exported, used - exported
    # and every exported family has a panel
    assert exported <= used, exported - used
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))


def _metric(admin: httpx.Client, name: str, **labels: str) -> float:
    m = _samples(admin.get("/metrics").text)
    return sum(v for lab, v in m.get(name, []) if all(lab.get(k) == x for k, x in labels.items()))


def test_handover_is_measured_as_the_api_times_it(tmp_path: Path) -> None:
    """One GPU: b's job waits while a's runs, then takes the GPU over (standby promotion);
    the handover histogram holds exactly b's start minus a's end."""
    with EmbeddedBroker(broker_config(tmp_path, gpu_slots=1)) as eb:
        admin = _api(eb, eb.admin_token)
        a, _ = _tenant(eb, "a")
        b, _ = _tenant(eb, "b")
        first = _submit(a, "x", "import time; time.sleep(1.5)")
        _running(admin, first)
        second = _submit(b, "y")
        assert admin.get(f"/v1/jobs/{second}").json()["state"] == "queued"
        done_a, done_b = wait_finished(a, first), wait_finished(b, second)
        assert _metric(admin, "stoker_handover_seconds_count") == 1
        gap = done_b["started"] - done_a["finished"]
        assert _metric(admin, "stoker_handover_seconds_sum") == pytest.approx(gap, abs=1e-6)


def test_keepalive_expiry_is_counted_and_explains_the_next_cold_start(tmp_path: Path) -> None:
    with EmbeddedBroker(broker_config(tmp_path, policies=PolicyConfig(keepalive_s=0.3))) as eb:
        admin = _api(eb, eb.admin_token)
        a, _ = _tenant(eb, "a")
        first = wait_finished(a, _submit(a, "x"))
        deadline = time.monotonic() + 20
        while _metric(admin, "stoker_pod_stops_total", reason="keepalive") < 1:
            assert time.monotonic() < deadline, "no keep-alive expiry counted"
            time.sleep(0.05)
        stopped = [e for e in admin.get("/v1/events").json() if e["kind"] == "pod.stopped"]
        assert [(e["pod"], e["reason"], e["tenant"]) for e in stopped] == [
            (first["pods"][0], "keepalive", "a")
        ]
        nxt = wait_finished(a, _submit(a, "x"))
        placed = a.get("/v1/events", params={"job": nxt["id"]}).json()
        reasons = next(e["reasons"] for e in placed if e["kind"] == "job.placed")
        assert nxt["path"] != "warm" and "last_pod_keepalive" in reasons, reasons


# a spot job that checkpoints on SIGTERM: its first run waits to be evicted, the next ends
SPOT = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
if os.environ["STOKER_RUN"] == "1":
    time.sleep(90)
"""


def test_preemptions_and_gpu_pool_gauges_equal_the_api(tmp_path: Path) -> None:
    with EmbeddedBroker(broker_config(tmp_path, gpu_slots=1, gpu_model="vgpu")) as eb:
        admin = _api(eb, eb.admin_token)
        a, _ = _tenant(eb, "a")
        b, _ = _tenant(eb, "b")
        body = {"profile": "plain", "reuse_tag": "s", "job_class": "spot", "gpus": 1.0}
        r = a.post("/v1/jobs", json={**body, "argv": ["python", "-c", SPOT]})
        assert r.status_code == 201, r.text
        spot = r.json()["id"]
        _running(admin, spot)
        (gpu_pool,) = admin.get("/v1/pools").json()
        m = _samples(admin.get("/metrics").text)
        assert m["stoker_gpu_pool_spot_gpus"] == [({"gpu_model": "vgpu"}, gpu_pool["spot_gpus"])]
        assert gpu_pool["spot_gpus"] == 1.0
        hp_body = {"profile": "plain", "reuse_tag": "h", "job_class": "hp", "gpus": 1.0}
        r = b.post("/v1/jobs", json={**hp_body, "argv": ["python", "-c", "pass"]})
        assert r.status_code == 201, r.text
        hp = wait_finished(b, r.json()["id"])
        done = wait_finished(a, spot)
        assert hp["exit_code"] == 0 and done["exit_code"] == 0
        assert (done["requeues"], done["requeue_reason"]) == (1, "preempted")

        jobs = admin.get("/v1/jobs").json()
        m = _samples(admin.get("/metrics").text)
        preempted = sum(j["requeues"] for j in jobs if j["requeue_reason"] == "preempted")
        assert _by(m["stoker_spot_preemptions_total"], "gpu_model") == Counter(
            {("vgpu",): preempted}
        )
        (gpu_pool,) = admin.get("/v1/pools").json()
        for name, key in (
            ("stoker_gpu_pool_capacity_gpus", "capacity"),
            ("stoker_gpu_pool_hp_gpus", "hp_gpus"),
            ("stoker_gpu_pool_spot_gpus", "spot_gpus"),
            ("stoker_spot_quota_gpus", "spot_quota"),
            ("stoker_spot_eta_ratio", "eta"),
            ("stoker_spot_eviction_rate_ratio", "eviction_rate_1d"),
        ):
            assert m[name] == [({"gpu_model": "vgpu"}, pytest.approx(gpu_pool[key]))], name
        assert gpu_pool["eviction_rate_1d"] > 0
        # the log says why the spot job ran twice
        ev = a.get("/v1/events", params={"job": spot}).json()
        requeued = [e for e in ev if e["kind"] == "job.requeued"]
        assert [e["reason"] for e in requeued] == ["preempted"], ev
        assert "evicted for HP demand" in requeued[0]["message"]
        kinds = [e["kind"] for e in ev]
        assert kinds.count("job.started") == 2 and kinds[-1] == "job.finished", kinds
