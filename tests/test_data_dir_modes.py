"""The broker's data dir is private: a looser dir and file are tightened at start (and said
so), and everything the broker writes while it runs is 600 in 700 dirs."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest

from rig import PY, broker_config, code_tar, tenant_api
from stoker.broker.embedded import EmbeddedBroker


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.lstat().st_mode)


def test_data_dir_and_files_are_private(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    (data / "notes.txt").write_text("an operator's file, left 644")
    (data / "notes.txt").chmod(0o644)
    caplog.set_level(logging.WARNING, "stoker.broker")
    with EmbeddedBroker(broker_config(tmp_path)) as eb:
        t = tenant_api(eb, "t")
        archive = t.http.post("/v1/code", content=code_tar({"main.py": "print('hi')"}))
        digest = archive.json()["digest"]
        row = t.run([PY, "-c", "import main"], code_digest=digest)
        assert row["exit_code"] == 0, row  # the job still reads its own archive
        assert t.http.post("/v1/secrets", json={"name": "K", "value": "v"}).status_code == 201
        loose = []
        for p in [data, *data.rglob("*")]:
            if "pods" in p.relative_to(data).parts or "env" in p.relative_to(data).parts:
                continue  # a pod's own dirs belong to its job; environments are shared
            if p.is_symlink() or p.is_socket():
                continue
            want = 0o700 if p.is_dir() else 0o600
            if _mode(p) & ~want:
                loose.append(f"{p.relative_to(data)} {_mode(p):o}")
        assert not loose, loose
        for name in ("events.jsonl", "stoker.db", "admin.token", "secret.key", "broker.lock"):
            assert (data / name).exists(), name
        assert _mode(eb.cfg.runtime_dir / "code" / digest) == 0o600
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert f"{data} was 755, now 700" in said and "notes.txt was 644, now 600" in said
