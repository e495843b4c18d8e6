"""``stoker mcp``: stoker's tools for agents over the Model Context Protocol (the official
``mcp`` SDK, the ``mcp`` extra), on stdio or streamable HTTP.

Tools: ``run_code``, ``run_command``, ``read_file``, ``write_file`` and ``list_profiles``.
One MCP session is one stoker session: its calls carry one reuse tag, so they run in the
same warm pod and find the files of the calls before. A session is the server's process on
stdio, a transport session (``Mcp-Session-Id``) on streamable HTTP before MCP 2026-07-28;
that revision has no sessions on the wire, so the tools take a ``session`` name too (calls
with the same name share a pod; default: the one session of the server). Each call is a
``/sandbox-fusion/run_code`` job on the broker's code-run profile. When the session's pod
is gone (its keep-alive passed, it died, HP work reclaimed it), the tool result says so:
the files of earlier calls are gone and the next call starts in a fresh pod.
"""

# no `from __future__ import annotations`: the SDK reads the tools' annotations, and
# Context is imported where the server is built
import base64
import json
import uuid
from dataclasses import dataclass, field
from typing import Annotated, Any

import typer

from stoker.cli.broker import TokenFileOpt, TokenOpt, UrlOpt, _credentials, _fail

POD_LOST = (
    "[stoker: this session's pod was lost (pod {old} is gone, now {new}): files and state"
    " from earlier calls are gone]"
)
_TIMEOUT_S = 30.0


@dataclass
class _Session:
    """One MCP session's reuse tag and the pod its last call ran in."""

    tag: str
    pod: str | None = None


@dataclass
class Tools:
    """The tools' work against one broker, one :class:`_Session` per MCP session."""

    url: str
    token: str
    # an MCP session's key (see build_server) -> its stoker session
    sessions: dict[str, _Session] = field(default_factory=dict)

    def session(self, key: str) -> _Session:
        """The stoker session of MCP session ``key``."""
        if key not in self.sessions:
            self.sessions[key] = _Session(f"mcp-{uuid.uuid4().hex[:16]}")
        return self.sessions[key]

    async def run(self, key: str, **request: Any) -> tuple[dict[str, Any], str | None]:
        """One ``run_code`` call in the session's pod: the answer, and a note for the model
        when the session's pod changed since its last call (None when it did not)."""
        # imported here: `stoker --help` imports this module
        import httpx
        from mcp.server.mcpserver.exceptions import ToolError

        from stoker.broker.sandbox_fusion import QUEUE_WAIT_S, RUNNER_SLACK_S

        sess = self.session(key)
        # the broker answers within the job's queue wait, its timeout and the runner's slack
        run_timeout = float(request.get("run_timeout", _TIMEOUT_S))
        timeout = run_timeout + RUNNER_SLACK_S + QUEUE_WAIT_S + 30.0
        try:
            async with httpx.AsyncClient(timeout=timeout) as http:
                resp = await http.post(
                    f"{self.url}/sandbox-fusion/run_code",
                    json={"language": "python", **request, "reuse_tag": sess.tag},
                    headers={"Authorization": f"Bearer {self.token}"},
                )
        except httpx.HTTPError as exc:  # the model reads why (a crash's text stays here)
            raise ToolError(f"the broker at {self.url} is unreachable: {exc!r}") from exc
        if resp.status_code != 200:
            raise ToolError(f"the broker answered {resp.status_code}: {resp.text[:500]}")
        answer = dict(resp.json())
        pod, note = answer.get("executor_pod_name"), None
        if answer["status"] == "SandboxError" and pod is not None:
            # the platform failed under the job (its pod died): the next call starts afresh
            note, sess.pod = POD_LOST.format(old=pod, new="none yet"), None
        elif pod is not None:
            if sess.pod is not None and pod != sess.pod:
                note = POD_LOST.format(old=sess.pod, new=pod)
            sess.pod = pod
        return answer, note

    async def profiles(self) -> list[dict[str, Any]]:
        from stoker.client import AsyncClient

        async with AsyncClient(self.url, self.token) as c:
            return await c.profiles()


def _text(answer: dict[str, Any], note: str | None) -> str:
    """A run's answer as the model reads it."""
    if answer["status"] == "SandboxError":
        lines = [f"error: {answer['message']}"]
    else:
        run = answer["run_result"]
        if run["status"] == "TimeLimitExceeded":
            lines = ["timed out"]
        else:
            lines = [f"exit code: {run['return_code']}"]
        if run.get("stdout"):
            lines.append(f"stdout:\n{run['stdout']}")
        if run.get("stderr"):
            lines.append(f"stderr:\n{run['stderr']}")
    return "\n".join([note, *lines] if note else lines)


def build_server(url: str, token: str) -> Any:
    """The MCP server of stoker's tools against the broker at ``url``."""
    from mcp.server.mcpserver import Context, MCPServer

    tools = Tools(url.rstrip("/"), token)
    server = MCPServer(
        "stoker",
        log_level="WARNING",  # stdio: stderr is the client's log; one line per call is noise
        instructions=(
            "Run code and shell commands in a sandboxed stoker pod that is yours for this"
            " session: files you write stay between calls until the pod is lost (a result"
            " then says so)."
        ),
    )

    def key(ctx: Context, session: str) -> str:
        # a client on an MCP revision with transport sessions (Mcp-Session-Id, checked by
        # the transport) is one session; 2026-07-28 has none: the tools' ``session`` says
        return f"{(ctx.headers or {}).get('mcp-session-id', '')}/{session}"

    @server.tool()
    async def run_code(
        code: str, ctx: Context, language: str = "python", stdin: str | None = None,
        timeout_s: float = _TIMEOUT_S, session: str = "",
    ) -> str:  # fmt: skip
        """Run a program (python or bash) in this session's pod; its working directory
        keeps the session's files. Returns its exit code, stdout and stderr. ``session``:
        any name; calls with the same one share a pod and its files (default: one)."""
        req = {"code": code, "language": language, "stdin": stdin, "run_timeout": timeout_s}
        return _text(*await tools.run(key(ctx, session), **req))

    @server.tool()
    async def run_command(
        command: str, ctx: Context, timeout_s: float = _TIMEOUT_S, session: str = ""
    ) -> str:
        """Run a shell command (bash) in this session's pod, in the session's directory."""
        req = {"code": command, "language": "bash", "run_timeout": timeout_s}
        return _text(*await tools.run(key(ctx, session), **req))

    @server.tool()
    async def write_file(path: str, content: str, ctx: Context, session: str = "") -> str:
        """Write a text file (path relative to the session's directory)."""
        files = {path: base64.b64encode(content.encode()).decode()}
        answer, note = await tools.run(key(ctx, session), code="pass", files=files)
        if answer["status"] != "Success":
            return _text(answer, note)
        done = f"wrote {len(content.encode())} bytes to {path}"
        return f"{note}\n{done}" if note else done

    @server.tool()
    async def read_file(path: str, ctx: Context, session: str = "") -> str:
        """Read a text file (path relative to the session's directory)."""
        answer, note = await tools.run(key(ctx, session), code="pass", fetch_files=[path])
        if answer["status"] != "Success":
            return _text(answer, note)
        data = answer["files"].get(path)
        if data is None:
            text = f"no file {path}"
        else:
            text = base64.b64decode(data).decode("utf-8", "replace")
        return f"{note}\n{text}" if note else text

    @server.tool()
    async def list_profiles() -> str:
        """The broker's profiles (hardware shapes and environments) as JSON."""
        return json.dumps(await tools.profiles(), indent=1)

    return server


def mcp(
    url: UrlOpt = None,
    token: TokenOpt = None,
    token_file: TokenFileOpt = None,
    transport: Annotated[
        str, typer.Option(help="stdio, or http (streamable HTTP, at /mcp)")
    ] = "stdio",
    host: Annotated[str, typer.Option(help="http: the address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="http: the port")] = 8766,
) -> None:
    """Serve stoker's tools to agents over MCP (one MCP session = one warm pod)."""
    base, tok = _credentials(url, token, token_file)
    if transport not in ("stdio", "http"):
        _fail(f"--transport: {transport!r} is neither stdio nor http")
    try:
        server = build_server(base, tok)
    except ImportError:
        _fail("stoker mcp needs the mcp extra: pip install 'stoker[mcp]'")
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=port)


def register(app: typer.Typer, sim_app: typer.Typer) -> None:
    """Add ``stoker mcp`` to the ``stoker`` command."""
    app.command()(mcp)
