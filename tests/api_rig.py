"""Helpers for tests that drive a real broker through its HTTP API with plain httpx."""

from __future__ import annotations

import time
from typing import Any

import httpx


def wait_finished(api: httpx.Client, job_id: str, timeout_s: float = 60.0) -> dict[str, Any]:
    """The job's row once finished, or as it is when ``timeout_s`` passes (a wait also
    returns when the job is re-queued: this waits again)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = max(0.0, deadline - time.monotonic())
        row = dict(api.get(f"/v1/jobs/{job_id}/wait", params={"timeout_s": left}).json())
        if row["state"] == "finished" or left == 0.0:
            return row
