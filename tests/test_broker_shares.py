"""Tenant shares through the live broker: one tenant's flood does not run ahead of another
tenant's job, and a tenant's caps answer at submit (429 and 422 naming the field)."""

from __future__ import annotations

from pathlib import Path

import pytest

import stoker
from rig import PY, broker_config, tenant_api
from stoker.broker.config import BrokerConfig, ConfigError, ShareConfig, SharesConfig
from stoker.broker.embedded import EmbeddedBroker

SLEEP = [PY, "-c", "import time; time.sleep(0.3)"]
FLOOD = 12  # three times what fair order lets start before b's job


def _started_rank(shares: SharesConfig | None, tmp: Path) -> int:
    """Tenant a submits FLOOD jobs on a broker of two pods, then tenant b one: how many of
    a's jobs started before b's."""
    with EmbeddedBroker(broker_config(tmp, shares=shares)) as eb:
        a, b = tenant_api(eb, "a"), tenant_api(eb, "b")
        flood = []
        for _ in range(FLOOD):
            r = a.submit(SLEEP, tag="flood")
            assert r.status_code == 201, r.text
            flood.append(r.json()["id"])
        r = b.submit([PY, "-c", "print('mine')"], tag="one")
        assert r.status_code == 201, r.text
        mine = b.wait(r.json()["id"], timeout_s=120)
        assert mine["state"] == "finished" and mine["exit_code"] == 0
        rows = [a.wait(j, timeout_s=120) for j in flood]
        assert all(row["exit_code"] == 0 for row in rows)
        return sum(1 for row in rows if row["started"] < mine["started"])


def test_one_job_does_not_wait_for_another_tenants_flood(tmp_path: Path) -> None:
    fifo = _started_rank(None, tmp_path / "fifo")
    fair = _started_rank(SharesConfig(), tmp_path / "fair")
    assert fifo == FLOOD  # submit order: all of a's first
    assert fair <= 4  # fair order: b's job is next once a pod is free


def test_caps_answer_at_submit(tmp_path: Path) -> None:
    shares = SharesConfig(
        default=ShareConfig(max_queued=2, max_timeout_s=60),
        tenants={"big": ShareConfig(max_queued=100)},
    )
    with EmbeddedBroker(broker_config(tmp_path, gpu_slots=1, shares=shares)) as eb:
        a = tenant_api(eb, "a")
        r = a.submit(SLEEP, timeout_s=61)
        assert r.status_code == 422, r.text
        assert r.json()["field"] == "body.timeout_s" and "60 s" in r.json()["message"]
        long = [PY, "-c", "import time; time.sleep(30)"]
        ids = []
        for i in range(3):  # one runs, two queue
            r = a.submit(long, tag=f"t{i}")
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
        r = a.submit(long, tag="t9")
        assert r.status_code == 429, r.text
        assert r.json()["error"] == "tenant_limit" and "max_queued" in r.json()["message"]
        sdk = stoker.Client(eb.url, a.token)
        with sdk, pytest.raises(stoker.client.TenantLimit, match="max_queued"):
            sdk.run("plain", ["true"], reuse_tag="t10")
        big = tenant_api(eb, "big")
        assert big.submit(long, tag="b").status_code == 201  # its own cap
        for job_id in ids:
            assert a.http.post(f"/v1/jobs/{job_id}/cancel").status_code in (200, 202)
        jobs = a.http.get("/v1/jobs").json()
        assert {j["id"] for j in jobs} >= set(ids)  # nothing acknowledged was dropped


def test_shares_config_errors_name_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[shares.tenants.team]\nweight = 0\n")
    with pytest.raises(ConfigError, match=r"shares\.tenants\.team\.weight"):
        BrokerConfig.load(bad)
    bad.write_text("[shares.default]\nhp_gpus = { any = -1 }\n")
    with pytest.raises(ConfigError, match=r"shares\.default\.hp_gpus"):
        BrokerConfig.load(bad)
    good = tmp_path / "good.toml"
    good.write_text("[shares.default]\nmax_queued = 5\n[shares.tenants.t]\nweight = 2\n")
    built = BrokerConfig.load(good).build_policies().policies.shares
    assert built is not None and built.of("t").weight == 2 and built.of("x").max_queued == 5
