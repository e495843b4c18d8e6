"""Warm pools a user sizes, through the real broker (config file, HTTP API, sandboxes):
CPU-only profiles for verifiers, a minimum warm count, and a session's renewal."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

import stoker
from stoker.broker.config import BrokerConfig
from stoker.broker.embedded import EmbeddedBroker
from stoker.client import InvalidRequest, JobResult, JobShape

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) not installed"),
    pytest.mark.timeout(180),
]

CONFIG = """
gpu_slots = 2
max_keepalive_s = 600
[policies]
keepalive_s = 120
[cpu_slots]
cpus = 4.0
memory_mb = 4096
[profiles.verify]
gpus = 0
cpus = 0.5
memory_mb = 256
[profiles.plain]
min_warm = 1
"""


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    root = tmp_path_factory.mktemp("pools")
    (root / "broker.toml").write_text(f'data_dir = "{root / "data"}"\n' + CONFIG)
    cfg = BrokerConfig.load(root / "broker.toml")
    with EmbeddedBroker(cfg) as eb:
        yield eb


@pytest.fixture(scope="module")
def client(broker: EmbeddedBroker) -> Iterator[stoker.Client]:
    with stoker.Client(broker.url, broker.admin_token) as admin:
        token = admin.create_tenant("rl")
    with stoker.Client(broker.url, token) as c:
        yield c


def _verify(c: stoker.Client, i: int) -> JobResult:
    argv = ["python", "-c", f"print('reward', {i} % 2)"]
    return c.run("verify", argv, reuse_tag=f"verifier-{i}").result(timeout_s=120)


def test_eight_parallel_verifiers_on_a_cpu_only_profile(client: stoker.Client) -> None:
    with ThreadPoolExecutor(8) as pool:
        first = list(pool.map(lambda i: _verify(client, i), range(8)))
        second = list(pool.map(lambda i: _verify(client, i), range(8)))
    assert all(r.ok for r in first + second), [r.failure for r in first + second]
    assert [r.stdout for r in second] == [f"reward {i % 2}\n".encode() for i in range(8)]
    assert [r.path for r in first] == ["cold"] * 8
    assert [r.path for r in second] == ["warm"] * 8  # every verifier back in its own pod
    assert [r.pods for r in second] == [r.pods for r in first]
    verify_pods = [p for p in client.pods() if p["profile"] == "verify"]
    assert len(verify_pods) == 8 and all(p["gpus"] == [] for p in verify_pods)
    # hp and spot jobs need a GPU: a 4xx naming the field, nothing stored
    with pytest.raises(InvalidRequest, match="CPU-only") as err:
        client.run("verify", ["true"], shape=JobShape("hp"))
    assert err.value.field == "body.job_class"
    prof = {p["name"]: p for p in client.profiles()}
    assert prof["verify"]["gpus"] == 0 and prof["plain"]["min_warm"] == 1


def test_min_warm_keeps_a_spare_pod_a_new_caller_takes(
    broker: EmbeddedBroker, client: stoker.Client
) -> None:
    with stoker.Client(broker.url, broker.admin_token) as admin:  # spares have no tenant yet
        _spare_taken_and_replaced(admin, client)


def _spare_taken_and_replaced(admin: stoker.Client, client: stoker.Client) -> None:
    def spares() -> list[dict[str, object]]:
        return [
            p
            for p in admin.pods()
            if p["profile"] == "plain" and p["state"] == "standby" and p["reuse_tag"] is None
        ]

    deadline = time.monotonic() + 60
    while not spares() and time.monotonic() < deadline:
        time.sleep(0.1)
    (spare,) = spares()
    res = client.run("plain", ["python", "-c", "print(1)"], reuse_tag="new-caller").result(60)
    assert res.ok and res.path == "standby" and res.pods == (spare["id"],)

    # the minimum is kept: another spare comes up on the other GPU slot (beside the taken
    # one, on its GPU, a 0.1-share standby may be staged too)
    def elsewhere() -> list[dict[str, object]]:
        return [p for p in spares() if p["gpus"] != spare["gpus"]]

    deadline = time.monotonic() + 60
    while not elsewhere() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(elsewhere()) == 1 and elsewhere()[0]["id"] != spare["id"]


def test_session_renew_extends_its_pods_keepalive(client: stoker.Client) -> None:
    with client.session("verify") as s:
        assert s.run(["python", "-c", "print(2)"]).ok
        before = next(p for p in client.pods() if p["id"] == s.pod)["keepalive_deadline"]
        renewed = s.renew(500)
        assert renewed["pods"] == [s.pod] and renewed["until"] > before
        after = next(p for p in client.pods() if p["id"] == s.pod)["keepalive_deadline"]
        assert after == pytest.approx(renewed["until"], abs=0.01)
        # out of range: a 4xx naming the field, and nothing changed
        for bad in (601, 0, -5):
            with pytest.raises(InvalidRequest, match="keepalive_s") as err:
                s.renew(bad)
            assert err.value.field == "body.keepalive_s"
        assert next(p for p in client.pods() if p["id"] == s.pod)["keepalive_deadline"] == after
    # a tag without a pod: nothing to keep, and it says so
    with client.session("verify") as fresh:
        assert fresh.renew(60)["pods"] == []
