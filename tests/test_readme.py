"""The README's quickstart runs as written: its Python blocks and its `stoker run` lines,
against a real embedded broker (the test command itself is .ci/run's)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from api_rig import embedded_broker, tenant_token
from stoker.broker.config import BrokerProfile

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), re.S)


def test_readme_is_short_and_keeps_its_two_commands() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    assert "scripts/bootstrap.sh && .venv/bin/stoker demo" in text
    assert "<!-- test-command -->" in text


def test_the_quickstart_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    python = _blocks("python")
    runs = [line for line in README.read_text().splitlines() if line.startswith("stoker run -p")]
    assert len(python) >= 2 and len(runs) == 2
    with embedded_broker(tmp_path / "data", [BrokerProfile.simple("plain")], 2) as eb:
        env = {**os.environ, "STOKER_URL": eb.url, "STOKER_TOKEN": tenant_token(eb, "me")}
        for code in python:
            out = subprocess.run(
                [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
            )
            assert out.returncode == 0, out.stderr
        assert "step 4" in out.stdout or "[1, 0, 1]" in out.stdout
        for line in runs:
            argv = shlex.split(line.split("#")[0])
            cmd = [sys.executable, "-m", "stoker.cli.main", *argv[1:]]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, out.stderr
            assert "guaranteed run" in out.stdout or "run 1" in out.stdout, out.stdout
