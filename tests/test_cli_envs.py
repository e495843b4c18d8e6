"""``stoker up`` builds its profiles' environments (uv) before it serves, with a progress
display on stderr; a build that fails is a one-line error and a non-zero exit."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from runtime_rig import tiny_wheel
from stoker.broker.embedded import free_port

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) not installed"),
    pytest.mark.timeout(240),
]


def _up(tmp_path: Path, package: str) -> tuple[subprocess.Popen[bytes], Path, str]:
    wheels = tmp_path / "wheels"
    wheels.mkdir(exist_ok=True)
    conf = tmp_path / "broker.toml"
    conf.write_text(
        f'data_dir = "{tmp_path / "data"}"\nfind_links = ["{wheels}"]\nno_index = true\n'
        f'[profiles.tools]\npackages = ["{package}"]\n'
    )
    port = free_port()
    log = tmp_path / "up.log"
    argv = [sys.executable, "-m", "stoker.cli.main", "up", "--config", str(conf)]
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [*argv, "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    return proc, log, f"http://127.0.0.1:{port}"


def test_up_builds_the_profile_environments_with_progress(tmp_path: Path) -> None:
    name = f"stokerenv{uuid.uuid4().hex[:6]}"
    (tmp_path / "wheels").mkdir()
    tiny_wheel(tmp_path / "wheels", name, "x")
    proc, log, url = _up(tmp_path, name)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"{url}/v1/ready", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        assert proc.poll() is None, log.read_text()
        text = log.read_text()
        assert "environments ready" in text and "1/1" in text, text
        # built where the runtime looks for it, so no pod start waits on uv
        envs = list((tmp_path / "data" / "runtime" / "env" / "envs").glob("*/.stoker-complete"))
        assert len(envs) == 1 and name in envs[0].read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) in (0, -signal.SIGTERM)


def test_up_with_a_package_uv_cannot_find_is_one_line(tmp_path: Path) -> None:
    proc, log, _url = _up(tmp_path, f"stokernothere{uuid.uuid4().hex[:6]}")
    assert proc.wait(180) == 2
    errors = [line for line in log.read_text().splitlines() if line.startswith("stoker:")]
    assert len(errors) == 1 and "profiles.tools.packages:" in errors[0], log.read_text()
    assert "Traceback" not in log.read_text()
