"""A session picked up by its reuse tag in another process: whether its pod (and files)
still exist, and the files API (list, stat, delete), sync and async."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

import stoker
from stoker.broker.embedded import EmbeddedBroker
from stoker.client import SessionFileError
from test_broker import _cfg


def test_a_session_says_whether_its_pod_and_files_are_still_there(tmp_path: Path) -> None:
    with EmbeddedBroker(_cfg(tmp_path, keepalive_s=2.0)) as eb:
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
            with pytest.raises(SessionFileError, match="No such file"):
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
