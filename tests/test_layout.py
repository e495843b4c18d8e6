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


def test_the_broker_builds_its_app_without_the_kubernetes_extra() -> None:
    """``pip install stoker`` has no lightkube: the broker's app (every route) must not
    need it; only the Kubernetes runtime does."""
    code = (
        "import sys, tempfile, pathlib\n"
        "class NoKube:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('lightkube', 'yaml'):\n"
        "            raise ImportError(f'no {name} (the kubernetes extra)')\n"
        "sys.meta_path.insert(0, NoKube())\n"
        "from stoker.broker.app import Broker, create_app\n"
        "from stoker.broker.config import BrokerConfig\n"
        "create_app(Broker(BrokerConfig(data_dir=pathlib.Path(tempfile.mkdtemp()))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
