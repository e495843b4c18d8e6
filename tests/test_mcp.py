"""``stoker mcp`` against a real broker, through the official SDK's own client: stdio (the
client spawns ``stoker mcp``) and streamable HTTP (two sessions, two pods)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client, StdioServerParameters

import stoker
from api_rig import embedded_broker, tenant_token
from stoker.broker.config import BrokerConfig, BrokerProfile, PolicyConfig
from stoker.broker.embedded import EmbeddedBroker, free_port
from stoker.cli.mcp_server import build_server

SRC = str(Path(stoker.__file__).resolve().parent.parent)
TOOLS = {"run_code", "run_command", "read_file", "write_file", "list_profiles"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    data = tmp_path_factory.mktemp("mcp") / "data"
    with embedded_broker(data, [BrokerProfile.simple("verify", gpus=0)], gpu_slots=0) as eb:
        yield eb


@pytest.fixture(scope="module")
def token(broker: EmbeddedBroker) -> str:
    return tenant_token(broker, "agent")


def _argv(broker: EmbeddedBroker, token: str, *extra: str) -> list[str]:
    return ["-m", "stoker.cli.main", "mcp", "--url", broker.url, "--token", token, *extra]


def _text(result: Any) -> str:
    assert not result.is_error, result
    return "".join(part.text for part in result.content)


def test_stdio_session_keeps_its_files(broker: EmbeddedBroker, token: str) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=_argv(broker, token),
        env={"PYTHONPATH": SRC, "PATH": os.environ["PATH"]},
    )

    async def main() -> None:
        async with Client(params) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            assert tools >= TOOLS
            wrote = await client.call_tool(
                "write_file", {"path": "notes/a.txt", "content": "héllo"}
            )
            assert "wrote 6 bytes" in _text(wrote)
            ran = await client.call_tool(
                "run_code", {"code": "print(open('notes/a.txt').read().upper())"}
            )
            assert "exit code: 0" in _text(ran) and "HÉLLO" in _text(ran)
            cmd = await client.call_tool("run_command", {"command": "echo x > b.txt; ls notes"})
            assert "a.txt" in _text(cmd)
            assert _text(await client.call_tool("read_file", {"path": "b.txt"})) == "x\n"
            missing = await client.call_tool("read_file", {"path": "none.txt"})
            assert _text(missing) == "no file none.txt"
            failed = await client.call_tool("run_code", {"code": "raise SystemExit(3)"})
            assert "exit code: 3" in _text(failed)
            cobol = await client.call_tool("run_code", {"code": "x", "language": "cobol"})
            assert "error: language 'cobol' is unknown here" in _text(cobol)
            refused = await client.call_tool("run_code", {"code": "pass", "timeout_s": 1e9})
            assert refused.is_error and "body.run_timeout" in refused.content[0].text
            profiles = _text(await client.call_tool("list_profiles", {}))
            assert '"verify"' in profiles
            assert "lost" not in _text(ran) + _text(cmd)  # one pod all along

    asyncio.run(main())


def test_streamable_http_sessions_are_apart(broker: EmbeddedBroker, token: str) -> None:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": SRC}
    argv = [sys.executable, *_argv(broker, token, "--transport", "http", "--port", str(port))]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)

        async def main() -> None:
            async with Client(url) as one, Client(url) as two:
                assert {t.name for t in (await one.list_tools()).tools} >= TOOLS
                # MCP 2026-07-28 has no transport sessions: the tools' session names them
                a, b = {"session": "a"}, {"session": "b"}
                await one.call_tool("write_file", {"path": "mine", "content": "1", **a})
                assert _text(await one.call_tool("read_file", {"path": "mine", **a})) == "1"
                assert (
                    _text(await two.call_tool("read_file", {"path": "mine", **b})) == "no file mine"
                )
                assert _text(await two.call_tool("read_file", {"path": "mine", **a})) == "1"

        asyncio.run(main())
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_lost_pod_is_said(tmp_path: Path) -> None:
    cfg = BrokerConfig(
        data_dir=tmp_path / "data",
        profiles=[BrokerProfile.simple("verify", gpus=0)],
        gpu_slots=0,
        policies=PolicyConfig(keepalive_s=0.5),  # the session's pod goes between two calls
    )
    with EmbeddedBroker(cfg) as eb, stoker.Client(eb.url, eb.admin_token) as admin:
        token = admin.create_tenant("agent")

        def pods() -> list[dict[str, Any]]:
            return [p for p in admin.pods() if p.get("reuse_tag", "").startswith("mcp-")]

        async def main() -> None:
            async with Client(build_server(eb.url, token)) as client:
                first = await client.call_tool("write_file", {"path": "f", "content": "1"})
                assert "lost" not in _text(first) and pods()
                deadline = time.monotonic() + 60
                while pods():  # its keep-alive passes: the broker stops it
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.1)
                again = _text(await client.call_tool("read_file", {"path": "f"}))
                assert "this session's pod was lost" in again and "no file f" in again

        asyncio.run(main())
