"""Profile packages and job deps from a package index of the operator's choosing (a local
PEP 503 index here, no network), and uv's whole error when an install fails."""

from __future__ import annotations

import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from stoker.broker.config import BrokerConfig, BrokerProfile
from stoker.broker.embedded import EmbeddedBroker, free_port
from stoker.cli.main import app
from stoker.runtime.envs import EnvBuilder, EnvBuildError


def _wheel(where: Path, name: str, value: str) -> Path:
    """A minimal pure-Python wheel of package ``name`` holding ``VALUE = value``."""
    dist = f"{name}-1.0.dist-info"
    path = where / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}/__init__.py", f"VALUE = {value!r}\n")
        z.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        z.writestr(
            f"{dist}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        z.writestr(f"{dist}/RECORD", "")
    return path


@pytest.fixture
def index(tmp_path: Path) -> Iterator[str]:
    """A PEP 503 simple index with one package, served by a real HTTP server."""
    root = tmp_path / "index"
    (root / "simple" / "tinypkg").mkdir(parents=True)
    wheel = _wheel(root, "tinypkg", "from-the-index")
    (root / "simple" / "tinypkg" / "index.html").write_text(
        f'<html><body><a href="../../{wheel.name}">{wheel.name}</a></body></html>'
    )
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "http.server",
            str(port),
            "--bind",
            "127.0.0.1",
            "--directory",
            str(root),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/simple/"
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        yield url
    finally:
        server.kill()
        server.wait()


def test_profile_packages_and_job_deps_from_the_index(tmp_path: Path, index: str) -> None:
    prof = BrokerProfile.simple("idx", packages=("tinypkg",), network=False)
    cfg = BrokerConfig(data_dir=tmp_path / "data", profiles=[prof], gpu_slots=1, index_url=index)
    with EmbeddedBroker(cfg) as eb:
        import stoker

        with stoker.Client(eb.url, eb.admin_token) as admin:
            token = admin.create_tenant("t")
        with stoker.Client(eb.url, token) as c:
            res = c.run("idx", ["python", "-c", "import tinypkg; print(tinypkg.VALUE)"]).result(120)
    assert res.exit_code == 0, res.stderr
    assert res.stdout.decode().strip() == "from-the-index"


def test_uvs_whole_error_is_told(tmp_path: Path, index: str) -> None:
    env = EnvBuilder(tmp_path / "env", index_url=index)
    with pytest.raises(EnvBuildError) as err:
        env.profile_env(("no-such-package-here",))
    text = str(err.value)
    assert "no-such-package-here" in text and len(text.splitlines()) > 1, text
    # and stoker up says it whole, not only uv's first line
    cfg = tmp_path / "broker.toml"
    cfg.write_text(
        f'data_dir = "{tmp_path / "data"}"\nindex_url = "{index}"\n'
        '[profiles.bad]\npackages = ["no-such-package-here"]\n'
    )
    res = CliRunner().invoke(app, ["up", "--config", str(cfg), "--port", str(free_port())])
    assert res.exit_code == 2
    said = res.output
    assert "profiles.bad.packages" in said and len(said.strip().splitlines()) > 1, said


def test_index_settings_are_checked(tmp_path: Path) -> None:
    from stoker.broker.config import ConfigError

    cfg = tmp_path / "c.toml"
    cfg.write_text('index_url = "ftp://x"\n')
    with pytest.raises(ConfigError, match="index_url"):
        BrokerConfig.load(cfg)
    cfg.write_text(f'ca_bundle = "{tmp_path / "none.pem"}"\n')
    with pytest.raises(ConfigError, match="ca_bundle: no such file"):
        BrokerConfig.load(cfg)
    pem = tmp_path / "ca.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\n")
    cfg.write_text(f'ca_bundle = "{pem}"\nextra_index_urls = ["https://pypi.org/simple"]\n')
    loaded = BrokerConfig.load(cfg)
    assert loaded.ca_bundle == pem and loaded.extra_index_urls == ("https://pypi.org/simple",)
