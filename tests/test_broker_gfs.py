"""hp and spot jobs in the live broker, end to end: real HTTP, a real SQLite file, real
bubblewrap sandboxes on virtual GPU slots, the SDK and the ``stoker`` command.

An HP job preempts a running spot job, which gets SIGTERM (its own code checkpoints),
is re-queued as ``preempted`` and runs again; HP jobs take GPUs from idle standby and warm
pods; a broker restart in the middle keeps all of it; ``/v1/pools`` shows what ran.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

import stoker
from rig import Api, broker_config, tenant_client, wait_for
from stoker.broker.config import (
    BrokerConfig,
    BrokerProfile,
    CpuSlots,
    ForecastConfig,
    PolicyConfig,
    SpotConfig,
)
from stoker.broker.embedded import EmbeddedBroker
from stoker.broker.store import Store
from stoker.cli.main import app
from stoker.client import InvalidRequest, Job, JobPreempted, JobShape

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) not installed"),
    pytest.mark.timeout(120),
]

PY = "python"
# a spot job that checkpoints on SIGTERM into its checkpoint dir: its first run waits to
# be preempted, later runs resume from what the first left there
SPOT = """
import os, signal, sys, time
run = int(os.environ["STOKER_RUN"])
state = os.path.join(os.environ["STOKER_CHECKPOINT_DIR"], "state")
def term(*_):
    with open(state, "w") as f:
        f.write("step 7")
    os.write(1, f"run {run}: SIGTERM, checkpointed\\n".encode())  # print is not reentrant
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
print(f"run {run}: started", flush=True)
if run == 1:
    time.sleep(90)
with open(state) as f:
    print(f"run {run}: resumed from {f.read()}", flush=True)
"""
SPOT_OUTPUT = (
    "run 1: started\nrun 1: SIGTERM, checkpointed\nrun 2: started\nrun 2: resumed from step 7\n"
)


def _checkpoints_dropped(cfg: BrokerConfig, job: str) -> None:
    """Once the job has ended for good its checkpoints leave the runtime's disk."""
    wait_for(lambda: not (cfg.runtime_dir / "checkpoints" / job).exists(), 10)


def _cfg(tmp: Path, gpu_slots: int = 1, **kw: Any) -> BrokerConfig:
    """A broker on one GPU pool ``vgpu`` whose forecaster answers at once and refits often."""
    return broker_config(
        tmp,
        gpu_slots=gpu_slots,
        gpu_model="vgpu",
        forecast=ForecastConfig(query_every_s=0.2, refit_every_s=0.5),
        spot=SpotConfig(grace_s=20.0),
        **kw,
    )


def _gpu_pool(c: stoker.Client) -> dict[str, Any]:
    (gpu_pool,) = c.pools()
    return gpu_pool


def _running_spot(c: stoker.Client) -> Job:
    """Submit the checkpointing spot job on the whole GPU; return it once it runs."""
    job = c.run("plain", [PY, "-c", SPOT], shape=JobShape("spot", gpus=1.0, guarantee_s=600))
    wait_for(lambda: "run 1: started" in job.logs())
    return job


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(_cfg(tmp_path)) as eb:
        yield eb


def test_bad_class_workers_gpus_get_4xx_naming_the_field(tmp_path: Path) -> None:
    with EmbeddedBroker(_cfg(tmp_path, gpu_slots=2)) as eb, tenant_client(eb, "a") as a:
        cases = [
            ({"job_class": "gold"}, "body.job_class"),
            ({"workers": 0}, "body.workers"),
            ({"job_class": "hp", "workers": 3, "gpus": 1}, "body.workers"),
            ({"job_class": "hp", "gpus": 0}, "body.gpus"),
            ({"job_class": "hp", "gpus": 1.5}, "body.gpus"),
            ({"job_class": "spot", "gpus": 4}, "body.gpus"),
            ({"job_class": "hp", "guarantee_s": 600}, "body.guarantee_s"),
            ({"job_class": "spot", "guarantee_s": -1}, "body.guarantee_s"),
            ({"gpus": 0.5}, "body.gpus"),  # a pool job takes its profile's shape
        ]
        for override, field in cases:
            body = {"profile": "plain", "argv": [PY, "-c", "pass"], "reuse_tag": "x", **override}
            r = Api(eb.url, a.token).http.post("/v1/jobs", json=body)
            assert 400 <= r.status_code < 500, (override, r.text)
            assert r.json()["field"] == field, (override, r.json())
            assert field in r.json()["message"]
        assert a.jobs() == []
        db = eb.cfg.db_path
    with sqlite3.connect(db) as conn:
        assert conn.execute("select count(*) from jobs").fetchone()[0] == 0


def test_a_shape_the_core_refuses_is_a_422_naming_the_field_and_nothing_is_stored(
    tmp_path: Path,
) -> None:
    """The core decides whether a job can ever start (``Core.refusal``): five workers of
    0.4 GPU fit two cards by their sum (the broker's old total-GPU check let them in) but
    a card holds two such shares, so they would wait for ever. The API answers 422 naming
    ``body.workers``, the SDK raises InvalidRequest, ``stoker run`` says it in one line
    and exits non-zero; neither the job nor a core event is stored."""
    with EmbeddedBroker(_cfg(tmp_path, gpu_slots=2)) as eb:
        with stoker.Client(eb.url, eb.admin_token) as admin:
            token = admin.create_tenant("a")
        a = stoker.Client(eb.url, token)
        body = {"profile": "plain", "argv": [PY, "-c", "pass"], "reuse_tag": "x"}
        refused = {**body, "job_class": "spot", "workers": 5, "gpus": 0.4}
        r = Api(eb.url, a.token).http.post(
            "/v1/jobs", json=refused, headers={"Idempotency-Key": "k"}
        )
        assert r.status_code == 422, r.text
        assert r.json()["field"] == "body.workers"
        assert "room for 0.4 of a card each" in r.json()["message"]
        with pytest.raises(InvalidRequest, match=r"body\.workers: 3 workers x 1") as err:
            a.run("plain", ["true"], shape=JobShape("hp", workers=3, gpus=1))
        assert (err.value.status, err.value.field) == (422, "body.workers")
        cli = CliRunner().invoke(
            app,
            ["run", "-p", "plain", "--class", "hp", "--gpus", "3", "--", "true"],
            env={"STOKER_URL": eb.url, "STOKER_TOKEN": token},
        )
        assert cli.exit_code == 2 and cli.stderr.count("\n") == 1, cli.stderr
        assert "body.gpus: a worker takes 3 GPUs on one node" in cli.stderr
        # what fits is taken: four such workers, two on each card
        fits = Api(eb.url, a.token).http.post(
            "/v1/jobs", json={**refused, "workers": 4}, params={"wait": 60}
        )
        assert fits.status_code == 201 and fits.json()["state"] == "finished", fits.text
        a.close()
        db = eb.cfg.db_path
    with sqlite3.connect(db) as conn:
        assert conn.execute("select count(*) from jobs").fetchone()[0] == 1
        kinds = [k for (k,) in conn.execute("select kind from core_events")]
        assert kinds.count("submitted") == 1


def test_hp_preempts_spot_which_checkpoints_and_runs_again(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    a, b = tenant_client(broker, "a"), tenant_client(broker, "b")
    with a, b:
        # the spot job through the command line, which says when it is preempted
        env = {
            **os.environ,
            "STOKER_URL": broker.url,
            "STOKER_TOKEN": a.token,
        }
        args = ["run", "-p", "plain", "--class", "spot", "--gpus", "1", "--guarantee-s", "600"]
        cli = subprocess.Popen(
            [str(Path(sys.executable).parent / "stoker"), *args, "--json", "--", PY, "-c", SPOT],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            row = wait_for(lambda: next(iter(a.jobs(["running"])), None))
            spot = Job(a, row)
            wait_for(lambda: "run 1: started" in spot.logs())
            gpu_pool = _gpu_pool(a)
            assert (gpu_pool["capacity"], gpu_pool["spot_gpus"], gpu_pool["hp_gpus"]) == (
                1.0,
                1.0,
                0.0,
            )
            assert [p["job"] for p in a.pods()] == [spot.id] and b.pods() == []  # its own
            hp = b.run("plain", [PY, "-c", "print('hp ran')"], shape=JobShape("hp", gpus=1.0))
            with pytest.raises(JobPreempted) as preempted:
                spot.wait(timeout_s=60, raise_preempted=True)
            assert preempted.value.requeues == 1 and preempted.value.job == spot.id
            assert hp.result(timeout_s=60).ok and b"hp ran" in hp.result().stdout
            res = spot.result(timeout_s=60)
            out, err = cli.communicate(timeout=60)
        finally:
            cli.kill()
        assert res.ok and res.requeues == 1, res
        assert res.stdout.decode() == SPOT_OUTPUT  # SIGTERM reached its code; nothing lost
        final = a.get(spot.id)
        assert (final["requeue_reason"], final["guarantee_failed"]) == ("preempted", 1)
        # its start latency is its first run's: placed, then started (never negative)
        assert final["start_latency_ms"] is not None and final["start_latency_ms"] >= 0, final
        assert cli.returncode == 0, err
        assert f"stoker: job {spot.id} preempted" in err
        _checkpoints_dropped(broker.cfg, spot.id)
        assert json.loads(out)["requeues"] == 1
        gpu_pool = _gpu_pool(a)
        assert (gpu_pool["spot_gpus"], gpu_pool["hp_gpus"]) == (0.0, 0.0)
        assert gpu_pool["eviction_rate_1d"] > 0 and gpu_pool["queued"] == {"hp": 0, "spot": 0}


def test_hp_takes_the_gpu_of_idle_standby_then_warm_pods(broker: EmbeddedBroker) -> None:
    with tenant_client(broker, "a") as a, tenant_client(broker, "b") as b:
        warm = a.run("plain", [PY, "-c", "pass"], reuse_tag="loop").result(60)
        assert warm.path == "cold"
        with stoker.Client(broker.url, broker.admin_token) as admin:
            pods = lambda: {p["id"]: p["state"] for p in admin.pods()}  # noqa: E731
            standby = wait_for(lambda: [p for p, s in pods().items() if s == "standby"])
            (warm_pod,) = [p for p, s in pods().items() if s == "warm"]
            # the one GPU is held by a warm pod (0.9) and a standby pod (0.1): a tenth of it
            # for HP is taken from the standby pod first, the cheaper one
            small = b.run("plain", [PY, "-c", "pass"], shape=JobShape("hp", gpus=0.1))
            assert small.result(60).ok
            assert standby[0] not in pods() and pods().get(warm_pod) == "warm"
            # the whole card for HP: the idle warm pod gives it up
            whole = b.run("plain", [PY, "-c", "pass"], shape=JobShape("hp", gpus=1.0))
            assert whole.result(60).ok
            assert warm_pod not in pods()
        # the loop comes back to a fresh pod; nothing of it was lost
        again = a.run("plain", [PY, "-c", "pass"], reuse_tag="loop").result(60)
        assert again.ok and again.path != "warm"


def test_restart_in_the_middle_keeps_spot_hp_and_demand_history(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, gpu_slots=2)
    eb = EmbeddedBroker(cfg, stop_pods=False).start()
    a, b = tenant_client(eb, "a"), tenant_client(eb, "b")
    # an HP job and a spot job run, one GPU each, when the broker goes
    hp_code = "import time; print('hp up', flush=True); time.sleep(4); print('hp done')"
    first = b.run("plain", [PY, "-c", hp_code], shape=JobShape("hp", gpus=1.0))
    wait_for(lambda: "hp up" in first.logs())
    spot = _running_spot(a)
    tokens = [c.token for c in (a, b)]
    a.close(), b.close()
    eb.stop(stop_pods=False)  # the broker goes; the pods and the processes in them stay
    with sqlite3.connect(cfg.db_path) as conn:
        demand = conn.execute("select tenant, gpu_model, gpus from hp_demand").fetchall()
    assert ("b", "vgpu", 1.0) in demand and {row[0] for row in demand} == {"b"}

    with EmbeddedBroker(cfg) as eb2:
        assert eb2.broker is not None and eb2.broker.recovery["adopted"] >= 2
        a2, b2 = stoker.Client(eb2.url, tokens[0]), stoker.Client(eb2.url, tokens[1])
        with a2, b2:
            assert a2.get(spot.id)["state"] == "running"  # adopted, still running
            done = Job(b2, b2.get(first.id)).result(60)
            assert done.ok and done.stdout == b"hp up\nhp done\n"
            # the forecaster refits on the stored history and its answer reaches the core
            gpu_pool = wait_for(lambda: (p := _gpu_pool(a2))["forecast"] and p)
            fc = gpu_pool["forecast"]
            assert len(fc["hours"]) == len(fc["mean"]) == len(fc["quantile"]) == 4
            assert all(q >= m for q, m in zip(fc["quantile"], fc["mean"], strict=True))
            # an HP gang of two needs both GPUs: the spot job gives its own up
            gang = b2.run("plain", [PY, "-c", "pass"], shape=JobShape("hp", workers=2, gpus=1))
            assert gang.result(60).ok
            res = Job(a2, a2.get(spot.id)).result(60)
            assert res.ok and res.requeues == 1 and res.stdout.decode() == SPOT_OUTPUT
            _checkpoints_dropped(cfg, spot.id)  # kept across the restart, then dropped


def _store_hp_peak(cfg: BrokerConfig) -> None:
    """The live report's history on a GPU pool of 2 GPUs: an HP job of 1 GPU for 40 s, then one of
    2 GPUs for 20 s, both done, stored as the broker stores what its meter saw (each
    minute's peak: the last two). The broker stores a minute only once it has ended, so a
    live run of them would wait a minute for its forecast."""
    minute = int(time.time() // 60)
    history = [("vgpu", "b", minute - 2, 1.0), ("vgpu", "b", minute - 1, 2.0)]
    Store.sqlite(cfg.db_path).record_hp_demand(history)


def _quota_pinned(eb: EmbeddedBroker) -> None:
    """Once the broker's forecaster (fitted on that history) has answered: HP at its recent
    peak over the guaranteed hour, so GFS's forecast quota is 0 with both GPUs free."""
    assert eb.broker is not None and eb.broker.loop is not None
    core = eb.broker.loop.core
    wait_for(lambda: "vgpu" in core.forecast)
    assert core.hpspot.quota["vgpu"] == 0.0 and core.hpspot.used["vgpu"]["hp"] == 0.0


def test_a_spot_job_runs_on_gpus_no_hp_job_uses_under_the_default_preset(tmp_path: Path) -> None:
    """The live report: with both HP jobs done and both GPUs free, the forecast holds them
    for HP (quota 0); the broker's default preset lends spot what HP does not hold while no
    HP job waits, so the spot job runs at once (HP would take the GPUs back by evicting)."""
    cfg = _cfg(tmp_path, gpu_slots=2)
    _store_hp_peak(cfg)
    with EmbeddedBroker(cfg) as eb, tenant_client(eb, "a") as a:
        _quota_pinned(eb)
        spot = a.run("plain", [PY, "-c", "print('spot ran')"], shape=JobShape("spot", gpus=1.0))
        res = spot.result(timeout_s=30)
        assert res.ok and res.stdout == b"spot ran\n" and res.requeues == 0
        assert _gpu_pool(a)["spot_quota"] == 2.0  # the quota in force: the loan


def test_a_waiting_job_is_told_what_holds_it(tmp_path: Path) -> None:
    """Under GFS's own quota (no loan) the spot job waits; its ``waiting_reason`` (the API,
    the stored list, ``stoker ps``) and its ``job.queued`` event name the quota, the
    forecast HP demand and the free GPUs. A CPU-only job waiting for the CPU slots is told
    the CPU slots, not GPUs."""
    cfg = _cfg(
        tmp_path,
        gpu_slots=2,
        policies=PolicyConfig(preset="gfs"),
        profiles=[BrokerProfile.simple("plain"), BrokerProfile.simple("verify", gpus=0)],
        cpu_slots=CpuSlots(cpus=1.0, memory_mb=4096),
    )
    _store_hp_peak(cfg)
    with EmbeddedBroker(cfg) as eb, tenant_client(eb, "a") as a:
        _quota_pinned(eb)
        spot = a.run("plain", [PY, "-c", "pass"], shape=JobShape("spot", gpus=1.0))
        said = (
            "spot quota 0 GPU of vgpu, 0 held by spot, the job asks 1 (forecast HP 2.0 of 2 GPUs"
            " over the guaranteed 1 h, eta 1.00; 2 GPUs free)"
        )
        assert a.get(spot.id)["waiting_reason"] == said
        (queued,) = [e for e in a.events(job=spot.id) if e["kind"] == "job.queued"]
        assert (queued["reason"], queued["message"]) == ("spot_quota", said)
        # a verifier holds the one CPU slot; the next one waits for it, the GPUs all free
        hold = a.run("verify", [PY, "-c", "import time; time.sleep(60)"], reuse_tag="v1")
        wait_for(lambda: a.get(hold.id)["state"] == "running")
        cpu = a.run("verify", [PY, "-c", "pass"], reuse_tag="v2")
        cpu_said = (
            "no CPU slots for 1 pod(s) of verify (1 CPU and 2 GB each, on one node): "
            "0 CPUs and 2 GB free of 1 and 4 GB"
        )
        assert a.get(cpu.id)["waiting_reason"] == cpu_said
        (queued,) = [e for e in a.events(job=cpu.id) if e["kind"] == "job.queued"]
        assert (queued["reason"], queued["message"]) == ("cpu_slots", cpu_said)
        # the stored rows and the command line say the same
        stored = {spot.id: said, cpu.id: cpu_said}
        wait_for(lambda: {r["id"]: r["waiting_reason"] for r in a.jobs(["queued"])} == stored)
        token = a.token
        env = {"STOKER_URL": eb.url, "STOKER_TOKEN": token, "COLUMNS": "200"}
        shown = CliRunner().invoke(app, ["ps", "--wide"], env=env).stdout
        assert f"{spot.id} waits: {said}" in shown and f"{cpu.id} waits: {cpu_said}" in shown
        hold.cancel()
        assert Job(a, a.get(cpu.id)).result(60).ok  # the freed slot is the waiting one's
        assert a.get(spot.id)["waiting_reason"] == said
        spot.cancel()


def test_fitted_keepalive_runs_live(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, policies=PolicyConfig(keepalive="fitted", keepalive_s=30.0))
    with EmbeddedBroker(cfg) as eb, tenant_client(eb, "a") as a:
        assert eb.broker is not None
        keepalive = eb.broker.loop.core.policies.keepalive
        assert type(keepalive).__name__ == "FittedKeepAlive" and keepalive.fallback_s == 30.0
        paths = [a.run("plain", [PY, "-c", "pass"], reuse_tag="loop").result(60).path]
        paths += [a.run("plain", [PY, "-c", "pass"], reuse_tag="loop").result(60).path]
        assert paths == ["cold", "warm"]
        (pod,) = [p for p in a.pods() if p["state"] == "warm"]
        assert pod["keepalive_deadline"] is not None  # the fallback until pauses are seen


def test_cli_pools_table_and_json(broker: EmbeddedBroker) -> None:
    with tenant_client(broker, "cli") as c:
        token = c.token
        env = {"STOKER_URL": broker.url, "STOKER_TOKEN": token, "COLUMNS": "200"}
        assert c.run("plain", [PY, "-c", "pass"], shape=JobShape("hp", gpus=0.5)).result(60).ok
    runner = CliRunner()
    res = runner.invoke(app, ["pools", "--json"], env=env)
    assert res.exit_code == 0, res.output
    (gpu_pool,) = json.loads(res.stdout)
    assert gpu_pool["gpu_model"] == "vgpu" and gpu_pool["capacity"] == 1.0
    assert set(gpu_pool) == {
        "gpu_model",
        "capacity",
        "hp_gpus",
        "spot_gpus",
        "spot_quota",
        "eta",
        "eviction_rate_1d",
        "forecast",
        "queued",
    }
    table = runner.invoke(app, ["pools"], env=env)
    assert table.exit_code == 0 and "vgpu" in table.stdout and "spot quota" in table.stdout
    bad = runner.invoke(app, ["pools"], env={**env, "STOKER_TOKEN": "stk_bad"})
    assert bad.exit_code == 2 and "authorization" in bad.stderr
    assert httpx.get(f"{broker.url}/v1/pools").status_code == 401


def test_a_checkpoint_dir_is_the_jobs_own_and_leaves_with_it(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """A hostile job leaves a file and a link to a host file in its checkpoint dir and
    ends: the next job in the same pod (same reuse tag) finds the dir empty, the host file
    is untouched, and nothing of the job stays on the runtime's disk."""
    secret = tmp_path / "host-secret"
    secret.write_text("host only")
    leave = (
        "import os; d = os.environ['STOKER_CHECKPOINT_DIR']\n"
        "open(os.path.join(d, 'mine'), 'w').write('x' * 1000)\n"
        f"os.symlink({str(secret)!r}, os.path.join(d, 'link'))\n"
        "print(sorted(os.listdir(d)))"
    )
    look = "import os; print(sorted(os.listdir(os.environ['STOKER_CHECKPOINT_DIR'])))"
    with tenant_client(broker, "a") as a:
        first = a.run("plain", [PY, "-c", leave], reuse_tag="t").result(60)
        assert first.ok and first.stdout == b"['link', 'mine']\n", first
        _checkpoints_dropped(broker.cfg, first.id)
        second = a.run("plain", [PY, "-c", look], reuse_tag="t").result(60)
        assert second.ok and second.stdout == b"[]\n", second
        assert second.pods == first.pods  # the same pod: its dir was emptied at the bind
    assert secret.read_text() == "host only"
