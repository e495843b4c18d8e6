"""Helpers for tests that drive a real broker through its HTTP API: an embedded broker
with a tenant, and waiting on a job with plain httpx."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

import stoker
from stoker.broker.config import BrokerConfig, BrokerProfile
from stoker.broker.embedded import EmbeddedBroker


@contextmanager
def embedded_broker(
    data_dir: Path, profiles: list[BrokerProfile], gpu_slots: int
) -> Iterator[EmbeddedBroker]:
    """A real broker process on ``data_dir`` with ``profiles``, stopped on exit."""
    cfg = BrokerConfig(data_dir=data_dir, profiles=profiles, gpu_slots=gpu_slots)
    with EmbeddedBroker(cfg) as eb:
        yield eb


def tenant_token(broker: EmbeddedBroker, name: str) -> str:
    """A new tenant's token, made through the API with the admin token."""
    with stoker.Client(broker.url, broker.admin_token) as admin:
        return admin.create_tenant(name)


def wait_finished(api: httpx.Client, job_id: str, timeout_s: float = 60.0) -> dict[str, Any]:
    """The job's row once finished, or as it is when ``timeout_s`` passes (a wait also
    returns when the job is re-queued: this waits again)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = max(0.0, deadline - time.monotonic())
        row = dict(api.get(f"/v1/jobs/{job_id}/wait", params={"timeout_s": left}).json())
        if row["state"] == "finished" or left == 0.0:
            return row
