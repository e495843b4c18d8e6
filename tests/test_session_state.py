"""A session picked up by its reuse tag in another process: whether its pod (and files)
still exist, and the files API (list, stat, delete), sync and async."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from pathlib import Path

import pytest

import stoker
from rig import broker_config
from stoker.broker.config import PolicyConfig
from stoker.broker.embedded import EmbeddedBroker
from stoker.client import SessionFileError


def test_a_session_says_whether_its_pod_and_files_are_still_there(tmp_path: Path) -> None:
    with EmbeddedBroker(broker_config(tmp_path, policies=PolicyConfig(keepalive_s=2.0))) as eb:
        with stoker.Client(eb.url, eb.admin_token) as admin:
            token = admin.create_tenant("t")
        with stoker.Client(eb.url, token) as c:
            assert not c.session("plain", "notes").exists()  # nothing ran yet
            with c.session("plain", "notes") as s:
                s.files.write("a.txt", "hello")
                s.files.write("dir/b.txt", "x" * 10)
            # another process, by the tag alone
            again = c.session("plain", "notes")
            assert again.exists()
            state = c.session_state("plain", "notes")
            assert state["live"] and state["pods"] and state["until"] > time.time()
            names = {e["name"]: e for e in again.files.list()}
            assert names["a.txt"]["size"] == 5 and names["dir"]["dir"]
            assert again.files.stat("dir/b.txt")["size"] == 10
            again.files.delete("a.txt")
            with pytest.raises(SessionFileError, match=r"(?i)no such file"):
                again.files.read("a.txt")
            deadline = time.monotonic() + 30  # the keep-alive ends: the pod and its files go
            while again.exists():
                assert time.monotonic() < deadline
                time.sleep(0.2)
            with pytest.raises(SessionFileError, match="the session's pod was gone"):
                c.session("plain", "notes").files.read("dir/b.txt")
            with pytest.raises(stoker.InvalidRequest, match="profile"):
                c.session_state("nope", "notes")

            async def async_side() -> None:
                async with stoker.AsyncClient(eb.url, token) as ac:
                    s = ac.session("plain", "async-notes")
                    assert not await s.exists()
                    await s.files.write("c.txt", "abc")
                    assert await s.exists()
                    assert (await s.files.stat("c.txt"))["size"] == 3
                    assert [e["name"] for e in await s.files.list()] == ["c.txt"]
                    await s.files.delete("c.txt")
                    assert await s.files.list() == []

            asyncio.run(async_side())


def _store_bytes(eb: EmbeddedBroker) -> int:
    return sum(f.stat().st_size for f in eb.cfg.data_dir.glob("stoker.db*"))


def test_files_stream_in_and_out_past_a_jobs_output_cap_and_leave_nothing_stored(
    tmp_path: Path,
) -> None:
    """A 20 MiB file (over the 16 MiB a job may print) goes in from a local file and comes
    back out to one, with progress, in the same pod; no job runs for it and the store does
    not grow by it. Over ``max_file_bytes`` it is refused naming the cap, and nothing is
    left in the workspace."""
    cap = 24 * 2**20
    with EmbeddedBroker(broker_config(tmp_path, max_file_bytes=cap)) as eb:
        with stoker.Client(eb.url, eb.admin_token) as admin:
            token = admin.create_tenant("t")
        with stoker.Client(eb.url, token) as c, c.session("plain", "big") as s:
            s.run(["python", "-c", "pass"])
            src = tmp_path / "model.bin"
            src.write_bytes(os.urandom(20 * 2**20))
            jobs, stored = len(c.jobs()), _store_bytes(eb)
            told: list[tuple[int, int]] = []
            assert s.files.upload("ckpt/model.bin", src, progress=lambda *p: told.append(p))
            assert told[-1] == (src.stat().st_size, src.stat().st_size)
            out = tmp_path / "back.bin"
            assert s.files.download("ckpt/model.bin", out) == src.stat().st_size
            assert (
                hashlib.sha256(out.read_bytes()).digest()
                == hashlib.sha256(src.read_bytes()).digest()
            )
            assert len(c.jobs()) == jobs and _store_bytes(eb) - stored < 2**20
            assert not s.pod_lost
            # the job in the pod sees it where it was put
            check = (
                "import hashlib; "
                "print(hashlib.sha256(open('ckpt/model.bin', 'rb').read()).hexdigest())"
            )
            assert (
                s.run(["python", "-c", check]).stdout.decode().strip()
                == hashlib.sha256(src.read_bytes()).hexdigest()
            )
            with pytest.raises(stoker.InvalidRequest, match="max_file_bytes") as over:
                s.files.write("huge.bin", b"x" * (cap + 1))
            assert (over.value.status, over.value.field) == (413, "path")
            assert "huge.bin" not in {e["name"] for e in s.files.list()}
            s.files.write("notes/a.txt", "streamed")
            assert s.files.read("notes/a.txt") == b"streamed"
            # a session call's timeout_s is the job's limit, as Client.run's
            slow = s.run(["sleep", "30"], timeout_s=1.0, wait_timeout_s=30)
            assert slow.failure == "timeout", slow


def test_a_hostile_job_cannot_turn_a_file_transfer_on_the_host(tmp_path: Path) -> None:
    """A job leaves links in its workspace to a host file and to the host's root; reading
    through them is refused (never followed), writing over the file link replaces the
    link inside the workspace (the host file is untouched), writing under the directory
    link is refused; paths out of the workspace are refused naming ``path``; another
    tenant's session of the same tag has no pod to read from."""
    host = tmp_path / "host-secret.txt"
    host.write_text("host only")
    with EmbeddedBroker(broker_config(tmp_path)) as eb:
        with stoker.Client(eb.url, eb.admin_token) as admin:
            a_token, b_token = admin.create_tenant("a"), admin.create_tenant("b")
        with stoker.Client(eb.url, a_token) as a, a.session("plain", "tools") as s:
            plant = f"import os; os.symlink({str(host)!r}, 'leak'); os.symlink('/', 'root')"
            assert s.run(["python", "-c", plant]).ok
            for path in ("leak", "root/etc/hostname", "../x", "/etc/hostname"):
                with pytest.raises(stoker.InvalidRequest) as refused:
                    s.files.read(path)
                assert refused.value.field == "path", path
            with pytest.raises(stoker.InvalidRequest):
                s.files.write(f"root{tmp_path}/planted.txt", "x")
            assert not (tmp_path / "planted.txt").exists()
            s.files.write("leak", "mine now")
            assert host.read_text() == "host only"
            assert s.files.read("leak") == b"mine now"
            b = stoker.Client(eb.url, b_token)
            with b, pytest.raises(SessionFileError, match="the session's pod was gone"):
                b.session("plain", "tools").files.read("leak")
