"""The agent inside a pod: ``python -m stoker.agent --socket PATH [--preload torch] ...``.

It imports the profile's modules once (the zygote), listens on a Unix socket for its runtime,
and runs one job at a time: binds it (code, overlay, env, topology), forks it from the zygote
or execs it, streams its output, enforces its timeout, reports its exit with a typed failure,
and kills whatever the job left running. Only the workspace outlives a job.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from stoker.agent import protocol
from stoker.agent.binding import check_env, classify, topology_env, unpack_code
from stoker.agent.protocol import Message
from stoker.agent.zygote import Spare, preload

CHUNK = 64 * 1024
MAX_HELD = 4096  # output events kept while no runtime listens (~256 MiB at most)


@dataclass
class _Job:
    id: str
    pid: int
    started: float
    kill_failure: str | None = None  # set when the runtime (or the timeout) killed it
    task: asyncio.Task[None] | None = None  # its watcher (held so it is not collected)


class Agent:
    """One pod's agent: the zygote plus its connection to the runtime."""

    def __init__(
        self,
        socket_path: str,
        pod: str,
        workspace: Path,
        preloaded: dict[str, float],
        sweep: bool = False,
    ) -> None:
        self.socket_path = socket_path
        self.sweep = sweep  # only ever True inside the pod's own pid namespace
        self.pod = pod
        self.workspace = workspace
        self.preloaded = preloaded
        self.job: _Job | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._held: list[Message] = []  # events while no runtime is connected
        self._stop = asyncio.Event()
        self._spare: Spare | None = None

    # --- connection ------------------------------------------------------

    def state(self) -> Message:
        return {
            "pod": self.pod,
            "pid": os.getpid(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
            "gpus": os.environ.get("STOKER_GPUS", ""),
            "preloaded": self.preloaded,
            "job": self.job.id if self.job else None,
        }

    async def send(self, msg: Message) -> None:
        """Send an event, or hold it until a runtime connects."""
        writer = self._writer
        if writer is None or writer.is_closing():
            self._hold(msg)
            return
        try:
            writer.write(protocol.encode(msg))
            await writer.drain()
        except (ConnectionError, RuntimeError):
            self._hold(msg)

    def _hold(self, msg: Message) -> None:
        """Keep an event for the next runtime; output beyond MAX_HELD goes, oldest first
        (a job's running and exit events are always kept)."""
        self._held.append(msg)
        if len(self._held) > MAX_HELD:
            for i, old in enumerate(self._held):
                if old.get("ev") == "output":
                    del self._held[i]
                    break

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        old, self._writer = self._writer, writer
        if old is not None:
            old.close()  # the newest runtime wins (a broker that restarted)
        writer.write(protocol.encode({"ev": "hello", **self.state()}))
        held, self._held = self._held, []
        for msg in held:
            writer.write(protocol.encode(msg))
        await writer.drain()
        try:
            while (msg := await protocol.read_message(reader)) is not None:
                await self._handle(msg)
        except (ConnectionError, protocol.ProtocolError) as exc:
            print(f"agent: connection dropped: {exc}", file=sys.stderr)
        finally:
            if self._writer is writer:
                self._writer = None
            writer.close()

    async def _handle(self, msg: Message) -> None:
        op = msg.get("op")
        if op == "bind":
            await self._bind(msg)
        elif op == "kill":
            job = self.job
            if job is not None and job.id == msg.get("job") and job.kill_failure is None:
                job.kill_failure = str(msg.get("failure") or "cancelled")
                self._terminate(job, float(msg.get("grace_s") or 0.0))
        elif op == "promote":
            os.environ["CUDA_VISIBLE_DEVICES"] = str(msg.get("cuda_visible_devices", ""))
            os.environ["STOKER_GPUS"] = ",".join(msg.get("gpus") or ())
            await self.send({"ev": "promoted", **self.state()})
        elif op == "ping":
            await self.send({"ev": "pong", **self.state()})
        elif op == "scrub":
            await self._scrub(str(msg.get("pod") or self.pod))
        elif op == "shutdown":
            self._kill_others()
            self._stop.set()
        else:
            await self.send({"ev": "error", "job": msg.get("job"), "message": f"op: {op!r}"})

    async def _scrub(self, new_pod: str) -> None:
        """Make this pod a fresh one named ``new_pod``, keeping the zygote.

        The zygote never ran user code, so it is as clean as a new one and costs nothing to
        keep (a torch pod's agent takes seconds to start). Everything a job could have left
        goes: every other process (the sweep), the files in /tmp, /dev/shm and the workspace,
        and System V IPC objects; the runtime wipes the workspace again from outside.
        """
        if not self.sweep or self.job is not None:
            why = "not sandboxed" if not self.sweep else f"job {self.job.id} running"  # type: ignore[union-attr]
            await self.send({"ev": "error", "job": None, "message": f"scrub refused: {why}"})
            return
        self._kill_others()
        for root in ("/tmp", "/dev/shm", str(self.workspace)):
            _empty_dir(Path(root))
        if ipcrm := shutil.which("ipcrm"):
            proc = await asyncio.create_subprocess_exec(
                ipcrm, "--all", stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
            )
            await proc.wait()
        self._held.clear()
        self.pod = new_pod
        os.environ["STOKER_POD"] = new_pod
        await self.send({"ev": "scrubbed", **self.state()})

    # --- jobs --------------------------------------------------------------

    async def _bind(self, msg: Message) -> None:
        job_id = str(msg.get("job"))
        if self.job is not None:
            await self.send(
                {"ev": "error", "job": job_id, "message": f"pod busy with {self.job.id}"}
            )
            return
        try:
            entry = classify(msg["argv"])
            user_env = dict(msg.get("env") or {})
            check_env(user_env)
            if msg.get("code"):
                unpack_code(Path(msg["code"]), Path(msg["code"]).name, self.workspace)
            overlay = tuple(str(p) for p in msg.get("overlay") or ())
            topo = msg.get("topology") or {}
            env = dict(os.environ)
            env.update(user_env)
            env.update(
                topology_env(
                    int(topo.get("rank", 0)),
                    int(topo.get("world_size", 1)),
                    str(topo.get("master_addr", "127.0.0.1")),
                    int(topo.get("master_port", 29500)),
                )
            )
            env["STOKER_JOB"] = job_id
            if overlay:
                env["PYTHONPATH"] = os.pathsep.join(
                    [*overlay, *filter(None, [env.get("PYTHONPATH")])]
                )
            timeout_s = float(msg.get("timeout_s", 3600.0))
        except (KeyError, ValueError, TypeError, OSError) as exc:
            await self.send({"ev": "error", "job": job_id, "message": str(exc)})
            return
        spare, self._spare = self._spare or Spare.fork(), None
        spare.start(entry, env, str(self.workspace), overlay)
        self.job = job = _Job(job_id, spare.pid, time.time())
        await self.send({"ev": "running", "job": job_id, "pid": spare.pid, "at": job.started})
        loop = asyncio.get_running_loop()
        job.task = loop.create_task(self._watch(job, spare.stdout, spare.stderr, timeout_s))
        loop.call_soon(self._ensure_spare)  # the next job's fork happens while this one runs

    def _ensure_spare(self) -> None:
        if self._spare is None and not self._stop.is_set():
            self._spare = Spare.fork()

    async def _pump(self, job: _Job, fd: int, stream: str) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=CHUNK)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
        )
        try:
            while data := await reader.read(CHUNK):
                await self.send(
                    {
                        "ev": "output",
                        "job": job.id,
                        "stream": stream,
                        "data": protocol.pack_bytes(data),
                    }
                )
        finally:
            transport.close()

    async def _wait_exit(self, pid: int) -> int:
        """Wait for ``pid`` without a thread (a pidfd turns readable when it exits)."""
        loop = asyncio.get_running_loop()
        fd = os.pidfd_open(pid)
        exited = loop.create_future()
        loop.add_reader(fd, exited.set_result, None)
        try:
            await exited
        finally:
            loop.remove_reader(fd)
            os.close(fd)
        return os.waitpid(pid, 0)[1]

    async def _watch(self, job: _Job, out_r: int, err_r: int, timeout_s: float) -> None:
        pumps = [
            asyncio.ensure_future(self._pump(job, out_r, "stdout")),
            asyncio.ensure_future(self._pump(job, err_r, "stderr")),
        ]
        waiter = asyncio.ensure_future(self._wait_exit(job.pid))
        try:
            status = await asyncio.wait_for(asyncio.shield(waiter), timeout_s)
        except TimeoutError:
            job.kill_failure = job.kill_failure or "timeout"
            self._kill_others()
            status = await waiter
        # whatever the job started and left behind dies with it (it may hold the pipes)
        self._kill_others()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*pumps), 5.0)
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + sig
        failure: str | None = job.kill_failure
        if failure is None and code != 0:
            failure = "user_error"
        self.job = None
        await self.send(
            {
                "ev": "exited",
                "job": job.id,
                "exit_code": code,
                "signal": sig,
                "failure": failure,
                "at": time.time(),
            }
        )

    def _terminate(self, job: _Job, grace_s: float) -> None:
        """Stop ``job``: SIGTERM to its process group first when there is a grace (so it may
        checkpoint), SIGKILL to everything it runs once the grace has passed."""
        if grace_s <= 0:
            self._kill_others()
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(job.pid, signal.SIGTERM)  # the job called setsid: its group is its pid

        def kill_if_running() -> None:
            if self.job is job:
                self._kill_others()

        asyncio.get_running_loop().call_later(grace_s, kill_if_running)

    def _kill_others(self) -> None:
        """SIGKILL what the current job runs (and, in a sandbox, all it left behind).

        In the pod's own pid namespace (``sweep``) that is every process but its init, the
        agent and its spare: whatever a job started dies with it, however it detached.
        Anywhere else (an agent run by hand, or in a container whose pid namespace it does
        not own) only the job's session is killed: a sweep there would hit the whole host.
        """
        job = self.job
        if not self.sweep and job is None:
            return
        keep = {1, os.getpid()} | ({self._spare.pid} if self._spare else set())
        for _ in range(1000):
            alive = []
            for name in os.listdir("/proc"):
                if not name.isdigit() or int(name) in keep:
                    continue
                try:
                    fields = Path(f"/proc/{name}/stat").read_text().rpartition(")")[2].split()
                except OSError:
                    continue
                if fields[0] in ("Z", "X"):
                    continue  # dead already, waiting for its reaper
                # fields[3]: the session; the job called setsid, so its session id is its pid
                if self.sweep or (job is not None and int(fields[3]) == job.pid):
                    alive.append(int(name))
            if not alive:
                return
            for pid in alive:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.001)

    async def run(self) -> None:
        """Serve until told to shut down."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        server = await asyncio.start_unix_server(
            self._serve, self.socket_path, limit=protocol.MAX_LINE
        )
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self._stop.set)
        self._ensure_spare()
        async with server:
            await self._stop.wait()
        if self._spare is not None:
            self._spare.retire()
            os.waitpid(self._spare.pid, 0)


def _empty_dir(root: Path) -> None:
    """Remove everything inside ``root`` (what cannot be removed is left, silently)."""
    with contextlib.suppress(OSError):
        for child in root.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    child.unlink()


def in_own_pid_namespace() -> bool:
    """True when this process is pid 2 under bwrap as pid 1: a namespace it may sweep."""
    try:
        init = Path("/proc/1/comm").read_text().strip()
    except OSError:
        return False
    return os.getpid() == 2 and os.getppid() == 1 and init == "bwrap"


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m stoker.agent``."""
    parser = argparse.ArgumentParser(prog="python -m stoker.agent")
    parser.add_argument("--socket", required=True, help="Unix socket to listen on")
    parser.add_argument("--pod", default=os.environ.get("STOKER_POD", "pod"))
    parser.add_argument("--workspace", default=os.getcwd())
    parser.add_argument("--preload", default="", help="comma-separated modules to import")
    parser.add_argument(
        "--sandboxed",
        action="store_true",
        help="the agent is pid 2 of its own pid namespace under bwrap: kill every other "
        "process after each job (refused anywhere else)",
    )
    args = parser.parse_args(argv)
    if args.sandboxed and not in_own_pid_namespace():
        print("agent: --sandboxed outside a bwrap pid namespace; refusing", file=sys.stderr)
        raise SystemExit(2)
    modules = tuple(m for m in args.preload.split(",") if m)
    try:
        took = preload(modules)
    except ImportError as exc:
        print(f"agent: preload failed: {exc}", file=sys.stderr)
        raise SystemExit(3) from exc
    agent = Agent(args.socket, args.pod, Path(args.workspace), took, sweep=args.sandboxed)
    asyncio.run(agent.run())


if __name__ == "__main__":
    main()
