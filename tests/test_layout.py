"""Imports point one way: the SDK needs nothing of the broker, the forecasters nothing of the
simulator (checked in a fresh interpreter, through ``sys.modules``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _loaded(module: str) -> list[str]:
    code = (
        f"import json, sys, {module}; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('stoker.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize(
    ("module", "forbidden"),
    [
        ("stoker.client", ("stoker.broker", "stoker.sim", "stoker.runtime")),
        ("stoker.forecast", ("stoker.sim", "stoker.broker")),
        ("stoker.core", ("stoker.sim", "stoker.broker", "stoker.runtime", "stoker.forecast")),
    ],
)
def test_imports_point_one_way(module: str, forbidden: tuple[str, ...]) -> None:
    loaded = _loaded(module)
    assert module in loaded
    bad = [m for m in loaded if m.startswith(forbidden)]
    assert not bad, f"importing {module} loaded {bad}"
