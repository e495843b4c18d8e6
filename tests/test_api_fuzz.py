"""The API fuzzed from its own OpenAPI document (schemathesis): valid and invalid requests to
every operation, as a tenant and as the admin, against a real broker. No answer may be a 5xx,
and every answer must match the document (status code, content type, body schema).

The default run sends a couple of hundred cases; the ``slow`` run at least 2,000.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from stoker.broker.config import BrokerConfig, BrokerProfile
from stoker.broker.embedded import EmbeddedBroker

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap (bwrap) not installed"
)
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def _fuzz(tmp_path: Path, per_operation: int) -> int:
    """Fuzz every operation; returns how many cases were sent."""
    cfg = BrokerConfig(
        data_dir=tmp_path / "data",
        profiles=[BrokerProfile.simple("plain")],
        gpu_slots=2,
        max_timeout_s=5,  # a generated job never holds the run up
    )
    sent = 0
    with EmbeddedBroker(cfg) as eb:
        admin = {"Authorization": f"Bearer {eb.admin_token}"}
        r = httpx.post(f"{eb.url}/v1/tenants", json={"name": "fuzz"}, headers=admin)
        tenant = {"Authorization": f"Bearer {r.json()['token']}"}
        schema = schemathesis.openapi.from_url(f"{eb.url}/openapi.json")
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 15, [op.label for op in operations]
        for op in operations:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                for headers in (tenant, admin):
                    sent += _cases(op, mode, eb.url, headers, per_operation)
    return sent


def _cases(
    op: schemathesis.APIOperation,
    mode: GenerationMode,
    url: str,
    headers: dict[str, str],
    n: int,
) -> int:
    """Up to ``n`` generated cases of one operation, each sent and checked; how many."""
    sent = 0

    @settings(
        max_examples=n,
        deadline=None,
        derandomize=True,  # the same cases every run
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    @given(case=op.as_strategy(mode))
    def one(case: schemathesis.Case) -> None:
        nonlocal sent
        sent += 1
        case.call_and_validate(base_url=url, headers=headers, checks=CHECKS, timeout=30)

    try:
        one()
    except Unsatisfiable:
        # no invalid request exists for an operation without parameters or body
        assert mode is GenerationMode.NEGATIVE, op.label
    return sent


@pytest.mark.timeout(600)
def test_fuzz_short(tmp_path: Path) -> None:
    sent = _fuzz(tmp_path, per_operation=3)
    print(f"schemathesis: {sent} cases, no 5xx, no schema violation")
    assert sent >= 100


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_fuzz_long(tmp_path: Path) -> None:
    sent = _fuzz(tmp_path, per_operation=60)
    print(f"schemathesis: {sent} cases, no 5xx, no schema violation")
    assert sent >= 2000
