"""The agent's service: its connection to the runtime and the jobs it runs (see
:mod:`stoker.agent.__main__` for the process as a whole).

Imported only after the zygote is forked (``main``), so the zygote, and every job forked from
it, holds none of this module's imports (asyncio, subprocess, ssl and the threads' at-fork
hooks): a smaller address space to copy at each job's fork.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from collections import OrderedDict
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stoker.agent import STANDBY_ENV, protocol
from stoker.agent.binding import Entry, check_env, classify, topology_env
from stoker.agent.protocol import Message
from stoker.agent.zygote import JobUser, Spare, Zygote, run_as

CHUNK = 64 * 1024
#: bytes waiting to go to the runtime past which a job's output is no longer read (until
#: they have gone): a job that writes faster than the runtime reads waits, as it would on
#: a full pipe
OUTPUT_BACKLOG = 1 << 20
LINGER_S = 5.0  # how long a job's output is read after its exit (a detached child's pipe)
MAX_HELD = 4096  # output events kept while no runtime listens (~256 MiB at most)
DIAL_MIN_S, DIAL_MAX_S = 0.1, 5.0  # redial backoff bounds
# under $TMPDIR (/tmp in a pod), what a pod that cannot see the runtime's disk (dial mode)
# gets over its connection: code archives, and the deps its agent installs
CODE_DIR = "stoker-code"
#: runtime/sandbox.py binds a job's own dir here (a Kubernetes pod names its own: --checkpoint)
CHECKPOINT_DIR = "/stoker/checkpoint"
DEPS_DIR = "stoker-deps"
#: where a job may leave files besides its workspace (emptied after every job)
SCRATCH = ("/tmp", "/dev/shm", "/dev/mqueue")
MAX_RAN = 1024  # outcomes remembered (a restarted broker asks about its last jobs only)
LAYER_WAIT_S = 60.0  # how long a bind waits for its deps layer's imports (then: the zygote)
#: a job's deps as its layer is keyed: (its dependency dirs, the modules they provide)
DepsKey = tuple[tuple[str, ...], tuple[str, ...]]


@dataclass
class _Job:
    """The running job, watched by callbacks of the event loop (no task of its own): the
    readers of its output pipes, its timeout, and the zygote's report of its exit."""

    id: str
    pid: int
    started: float
    kill_failure: str | None = None  # set when the runtime (or the timeout) killed it
    output_limit: int | None = None  # bytes of output forwarded, both streams together
    output_sent: int = 0
    deps: DepsKey | None = None  # its extra dependencies (None: none to preload)
    pipes: dict[int, str] = field(default_factory=dict)  # open output fd -> its stream
    paused: bool = False  # its pipes are not read until the runtime catches up
    status: int | None = None  # its wait status, once its exit is handled (_exited)
    exited_at: float | None = None  # when the zygote reported its exit (wall clock)
    timer: asyncio.TimerHandle | None = None  # its timeout, then the linger after its exit


class Agent:
    """One pod's agent: the zygote plus its connection to the runtime."""

    def __init__(
        self,
        socket_path: str,
        pod: str,
        workspace: Path,
        preloaded: dict[str, float],
        zygote: Zygote,
        sweep: bool = False,
        user: JobUser | None = None,
        dial: tuple[str, int] | None = None,
        token: str = "",
        checkpoint_dir: str | None = None,
    ) -> None:
        self.socket_path = socket_path
        # the job's checkpoint dir where one exists: the sandbox's bind locally, the job's
        # own directory of its class's volume in a Kubernetes pod (--checkpoint)
        self.checkpoint_dir = checkpoint_dir or CHECKPOINT_DIR
        self.dial = dial  # (host, port) of the broker's agent gateway, instead of listening
        self.token = token
        self.sweep = sweep  # only ever True inside the pod's own pid namespace
        self.user = user  # the jobs' uid (None: the agent's own, outside a root sandbox)
        self.pod = pod
        self.workspace = workspace
        self.preloaded = preloaded
        self.job: _Job | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._held: list[Message] = []  # events while no runtime is connected
        self._stop = asyncio.Event()
        self._spare: Spare | None = None
        # the spares' clean parent, forked before any runtime connected (see Zygote)
        self.zygote = zygote
        zygote.on_exit = self._on_exit
        self._spare_from: Zygote = self.zygote
        # the deps layer: a zygote with the last job's extra dependencies imported (forked
        # from the clean one as the job's user), so later jobs of those deps skip the import
        self.layer: Zygote | None = None
        self.layer_deps: DepsKey | None = None
        self._layer_ready = asyncio.Event()
        self._exits: dict[int, int] = {}  # spare pid -> wait status (not the job's)
        self._discarded: set[int] = set()  # spares let go: their exit is nobody's business
        # job id -> its exit event: a bind is idempotent by job id, and a restarted broker
        # learns from the hello what ended while no broker listened
        self.ran: OrderedDict[str, Message] = OrderedDict()
        # the job whose deps are being installed (before it runs), and a kill meanwhile
        self._installing: str | None = None
        self._install_killed: str | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # binds with deps, output resumes
        self._stop_after_job = False  # SIGTERM came while a job ran
        self._kept_paths: Kept | None = None  # the host paths bound into the scratch dirs

    # --- connection ------------------------------------------------------

    def state(self) -> Message:
        return {
            "pod": self.pod,
            "pid": os.getpid(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
            "gpus": os.environ.get("STOKER_GPUS", ""),
            "standby": os.environ.get(STANDBY_ENV) == "1",
            "preloaded": self.preloaded,
            "job": self.job.id if self.job else None,
            "layer": None
            if self.layer is None or self.layer_deps is None
            else {"modules": list(self.layer_deps[1]), "ready": self.layer.ready},
        }

    def send(self, msg: Message) -> None:
        """Send an event (the transport buffers what the socket does not take at once), or
        hold it until a runtime connects. Only a job's output can pile up: its reading
        pauses past :data:`OUTPUT_BACKLOG` (:meth:`_output`)."""
        writer = self._writer
        if writer is None or writer.is_closing():
            self._hold(msg)
            return
        try:
            writer.write(protocol.encode(msg))
        except (ConnectionError, RuntimeError):
            self._hold(msg)
            return
        if writer.is_closing():  # it was open before: this write failed, the peer is gone
            self._hold(msg)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as a task, held until it is done (a task nobody holds may go)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _hold(self, msg: Message) -> None:
        """Keep an event for the next runtime; output beyond MAX_HELD goes, oldest first
        (a job's running and exit events are always kept)."""
        self._held.append(msg)
        if len(self._held) > MAX_HELD:
            for i, old in enumerate(self._held):
                if old.get("ev") == "output":
                    del self._held[i]
                    break

    def _from_runtime(self, writer: asyncio.StreamWriter) -> bool:
        """Whether the peer is outside this pod: SO_PEERCRED gives pid 0 for a process the
        pod's pid namespace cannot see, and a real pid for any of the pod's own."""
        if not self.sweep:
            return True  # not in a pod of our own: the socket's file mode is the guard
        sock = writer.get_extra_info("socket")
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, _uid, _gid = struct.unpack("3i", creds)
        return pid == 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._from_runtime(writer):
            print("agent: refused a connection from inside the pod", file=sys.stderr)
            writer.close()
            return
        old, self._writer = self._writer, writer
        if old is not None:
            # the newest runtime wins (a broker that restarted); the old one is told so,
            # since any other hang-up means the pod is broken and must be stopped
            with contextlib.suppress(ConnectionError, RuntimeError):
                old.write(protocol.encode({"ev": "taken_over"}))
            old.close()
        held, self._held = self._held, []
        hello = {
            "ev": "hello",
            **self.state(),
            "ran": {j: {k: m[k] for k in ("exit_code", "failure")} for j, m in self.ran.items()},
            "held": [m["job"] for m in held if m.get("ev") == "exited"],
        }
        writer.write(protocol.encode(hello))
        for msg in held:
            writer.write(protocol.encode(msg))
        await writer.drain()
        try:
            while (msg := await protocol.read_message(reader)) is not None:
                await self._handle(msg)
        except (ConnectionError, ValueError) as exc:  # ProtocolError, or a line too long
            print(f"agent: connection dropped: {exc}", file=sys.stderr)
        finally:
            if self._writer is writer:
                self._writer = None
            writer.close()

    async def _handle(self, msg: Message) -> None:
        op = msg.get("op")
        if op == "bind":
            if msg.get("deps"):  # an install takes a while: the connection keeps serving
                self._spawn(self._bind(msg))
            else:
                await self._bind(msg)
        elif op == "kill":
            job = self.job
            if job is not None and job.id == msg.get("job") and job.kill_failure is None:
                job.kill_failure = str(msg.get("failure") or "cancelled")
                self._terminate(job, float(msg.get("grace_s") or 0.0))
            elif self._installing is not None and self._installing == msg.get("job"):
                self._install_killed = str(msg.get("failure") or "cancelled")
        elif op == "promote":
            os.environ["CUDA_VISIBLE_DEVICES"] = str(msg.get("cuda_visible_devices", ""))
            os.environ["STOKER_GPUS"] = ",".join(msg.get("gpus") or ())
            os.environ.pop(STANDBY_ENV, None)
            self.send({"ev": "promoted", **self.state()})
        elif op == "ping":
            self.send({"ev": "pong", **self.state()})
        elif op == "scrub":
            self._scrub(str(msg.get("pod") or self.pod))
        elif op == "code":
            self._code_chunk(msg)
        elif op == "shutdown":
            self._kill_others()
            self._stop.set()
        else:
            self.send({"ev": "error", "job": msg.get("job"), "message": f"op: {op!r}"})

    def _code_chunk(self, msg: Message) -> None:
        """One chunk of a code archive the runtime sends (a pod that cannot see the
        broker's code cache: Kubernetes); the last one is checked against its digest."""
        digest = str(msg.get("digest", ""))
        code_dir = _scratch(CODE_DIR)
        part = code_dir / f".{digest}.part"
        try:
            if len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
                raise ValueError(f"code: bad digest {digest!r}")
            code_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            with open(part, "ab" if msg.get("offset") else "wb") as f:
                f.write(protocol.unpack_bytes(str(msg.get("data", ""))))
            if not msg.get("last"):
                return
            got = hashlib.sha256(part.read_bytes()).hexdigest()
            if got != digest:
                raise ValueError(f"code: archive's sha256 is {got}, not {digest}")
            part.rename(code_dir / digest)
        except (OSError, ValueError) as exc:
            with contextlib.suppress(OSError):
                part.unlink()
            self.send({"ev": "error", "job": None, "message": str(exc)})
            return
        self.send({"ev": "code", "digest": digest, "path": str(code_dir / digest)})

    def _scrub(self, new_pod: str) -> None:
        """Make this pod a fresh one named ``new_pod``, keeping the zygote.

        The zygote never ran user code (jobs cannot reach it: another uid, not dumpable,
        seccomp), so it is as clean as a new one and costs nothing to keep (a torch pod's
        agent takes seconds to start). Everything a job could have left goes: every other
        process (the sweep), the spare (re-forked from the zygote), the files in the scratch
        dirs and the workspace, and every System V IPC object (the socket's directory is the
        agent's alone); the runtime wipes the workspace again from outside.
        """
        if not self.sweep or self.job is not None:
            why = "not sandboxed" if not self.sweep else f"job {self.job.id} running"  # type: ignore[union-attr]
            self.send({"ev": "error", "job": None, "message": f"scrub refused: {why}"})
            return
        self._kill_others()
        self._drop_layer()  # its imports were the old owner's choice
        self._discard_spare()  # nothing at all is left but the agent
        self._clear_scratch(str(self.workspace))
        self._held.clear()
        self.ran.clear()  # a fresh pod: the jobs of the old one are settled
        self._ensure_spare()
        self.pod = new_pod
        os.environ["STOKER_POD"] = new_pod
        self.send({"ev": "scrubbed", **self.state()})

    # --- jobs --------------------------------------------------------------

    async def _bind(self, msg: Message) -> None:
        job_id = str(msg.get("job"))
        if self.job is not None and self.job.id == job_id:
            # a repeated bind (a restarted broker): never run a job twice
            job = self.job
            self.send({"ev": "running", "job": job_id, "pid": job.pid, "at": job.started})
            return
        if job_id in self.ran:
            self.send(self.ran[job_id])  # it ran already: the same answer again
            return
        if self._installing == job_id:
            return  # a repeated bind while its deps install: it runs once they are in
        busy = self.job.id if self.job is not None else self._installing
        if busy is not None:
            self.send({"ev": "error", "job": job_id, "message": f"pod busy with {busy}"})
            return
        if os.environ.get(STANDBY_ENV) == "1":
            self.send({"ev": "error", "job": job_id, "message": "pod stands by"})
            return
        try:
            entry = classify(msg["argv"])
            user_env = dict(msg.get("env") or {})
            check_env(user_env)
            code = str(msg["code"]) if msg.get("code") else None  # unpacked by the job itself
            limit = msg.get("output_limit")
            output_limit = None if limit is None else int(limit)
            overlay = tuple(str(p) for p in msg.get("overlay") or ())
            imports = tuple(str(m) for m in msg.get("imports") or ())
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
            env["STOKER_RUN"] = str(int(msg.get("run", 1)))  # > 1: it was preempted before
            if os.path.isdir(self.checkpoint_dir):  # kept across the job's runs (the runtime's)
                env["STOKER_CHECKPOINT_DIR"] = self.checkpoint_dir
            timeout_s = float(msg.get("timeout_s", 3600.0))
            deps = tuple(str(d) for d in msg.get("deps") or ())
        except (KeyError, ValueError, TypeError, OSError) as exc:
            self.send({"ev": "error", "job": job_id, "message": str(exc)})
            return
        if deps:
            built = await self._install(job_id, deps, timeout_s)
            if built is None:
                return
            overlay = (*overlay, built)
        if overlay:
            env["PYTHONPATH"] = os.pathsep.join([*overlay, *filter(None, [env.get("PYTHONPATH")])])
        layer_key = (overlay, imports) if overlay and imports else None
        zygote = await self._zygote_for(layer_key) if entry.in_zygote else self._spare_from
        spare = self._start(zygote, entry, env, overlay, code)
        if spare is None:
            self.send({"ev": "error", "job": job_id, "message": "the job's fork died"})
            return
        self.job = job = _Job(
            job_id, spare.pid, time.time(), output_limit=output_limit, deps=layer_key
        )
        self.send({"ev": "running", "job": job_id, "pid": spare.pid, "at": job.started})
        self._watch(job, spare.stdout, spare.stderr, timeout_s)
        # the next job's fork happens while this one runs
        asyncio.get_running_loop().call_soon(self._ensure_spare)

    async def _zygote_for(self, deps: DepsKey | None) -> Zygote:
        """Where a job of ``deps`` forks from: the deps layer holding them (once its imports
        are done; a bind waits for them, as the job would have imported them itself), else
        the clean zygote."""
        layer = self.layer
        if deps is None or layer is None or deps != self.layer_deps:
            return self.zygote
        if not layer.ready:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._layer_ready.wait(), LAYER_WAIT_S)
        return layer if layer is self.layer and layer.ready else self.zygote

    def _keep_layer(self, deps: DepsKey | None) -> None:
        """After a job of ``deps``: make them the pod's deps layer (the next job of the same
        caller most likely has the same). No deps: the layer stays for the next that has."""
        if deps is None or deps == self.layer_deps or self._stop.is_set():
            return
        self._drop_layer()
        self.layer = layer = self.zygote.layer(*deps)
        self.layer_deps = deps
        self._layer_ready.clear()
        layer.on_ready = self._on_layer_ready
        asyncio.get_running_loop().add_reader(layer.sock.fileno(), self._layer_readable)

    def _on_layer_ready(self) -> None:
        self._layer_ready.set()
        if self.job is None and self._spare_from is not self.layer:
            self._discard_spare()  # the next job most likely forks from the layer
            self._ensure_spare()

    def _layer_readable(self) -> None:
        layer = self.layer
        if layer is None:
            return
        try:
            layer.readable()
        except (ConnectionError, OSError) as exc:  # it died (its job may kill it): drop it
            print(f"agent: deps layer: {exc}", file=sys.stderr)
            self._drop_layer()

    def _drop_layer(self) -> None:
        """Let the deps layer go (it exits when its socket closes; the zygote reaps it).
        Only while no job of it runs, or when it died: the exit of a job it forked is then
        reported as killed, since no one is left to report it."""
        layer, self.layer, self.layer_deps = self.layer, None, None
        if layer is None:
            return
        if self._spare_from is layer:
            self._discard_spare()
            self._spare_from = self.zygote
        asyncio.get_running_loop().remove_reader(layer.sock.fileno())
        layer.sock.close()
        self._discarded.add(layer.pid)  # the zygote reports its exit: nobody's business
        for pid in layer.children:  # the spare let go above, or a job whose layer died
            self._discarded.discard(pid)
            if self.job is not None and pid == self.job.pid:
                self._on_exit(pid, int(signal.SIGKILL))  # a wait status: killed by SIGKILL
        self._layer_ready.set()  # a bind waiting for it goes on from the zygote

    async def _install(self, job_id: str, deps: tuple[str, ...], timeout_s: float) -> str | None:
        """Install a job's deps into an overlay in this pod (a pod that cannot see the
        runtime's: Kubernetes), as the agent's own unprivileged user; its path, or None
        when the install failed or the job was killed meanwhile (both reported)."""
        # here, not at the top: a local pod's interpreter (a profile env) never installs
        # deps and need not have the installer's imports (packaging)
        from stoker.agent.deps import EnvBuildError, install_in_pod

        self._installing, self._install_killed = job_id, None
        try:
            path = await asyncio.to_thread(install_in_pod, _scratch(DEPS_DIR), deps, timeout_s)
        except EnvBuildError as exc:
            self.send({"ev": "error", "job": job_id, "message": f"deps {list(deps)}: {exc}"})
            return None
        finally:
            self._installing = None
        if self._install_killed is not None:
            self._record_exit(
                job_id, 128 + signal.SIGKILL, signal.SIGKILL, self._install_killed, None
            )
            self.send(self.ran[job_id])
            return None
        return str(path)

    def _start(
        self,
        zygote: Zygote,
        entry: Entry,
        env: dict[str, str],
        overlay: tuple[str, ...],
        code: str | None,
    ) -> Spare | None:
        """Hand the job to a spare of ``zygote``; a spare that died meanwhile is replaced
        once."""
        if self._spare_from is not zygote:
            self._discard_spare()
            self._spare_from = zygote
        for _ in range(2):
            spare, self._spare = self._spare or zygote.spare(), None
            try:
                spare.start(entry, env, str(self.workspace), overlay, code)
                return spare
            except OSError:  # BrokenPipeError: it was killed
                for fd in (spare.stdout, spare.stderr):
                    os.close(fd)
                self._forget(spare.pid)
        return None

    def _ensure_spare(self) -> None:
        """Fork the next job's spare now: from the deps layer when it is ready (the next job
        most likely has the last one's deps), else from the zygote."""
        if self._spare is None and not self._stop.is_set():
            layer = self.layer
            self._spare_from = layer if layer is not None and layer.ready else self.zygote
            self._spare = self._spare_from.spare()

    def _discard_spare(self) -> None:
        spare, self._spare = self._spare, None
        if spare is not None:
            spare.retire()
            with contextlib.suppress(OSError):
                os.kill(spare.pid, signal.SIGKILL)
            self._forget(spare.pid)

    def _forget(self, pid: int) -> None:
        if self._exits.pop(pid, None) is None:
            self._discarded.add(pid)

    def _on_exit(self, pid: int, status: int) -> None:
        """The zygote reaped a spare (a job, or a spare let go). The job's end is handled in
        the loop's next turn: this may run inside a request to the zygote (:meth:`Zygote.spare`
        reads the reports that came before its answer), which must not send another."""
        if pid in self._discarded:
            self._discarded.discard(pid)
        elif (job := self.job) is not None and job.pid == pid:
            asyncio.get_running_loop().call_soon(self._exited, job, status)
        else:
            self._exits[pid] = status

    def _zygote_readable(self) -> None:
        try:
            self.zygote.readable()
        except (ConnectionError, OSError) as exc:  # no zygote, no jobs: the pod is done
            print(f"agent: {exc}", file=sys.stderr)
            asyncio.get_running_loop().remove_reader(self.zygote.sock.fileno())
            self._stop.set()

    def _clear_scratch(self, *more: str) -> None:
        """Empty the scratch dirs (and ``more``) and remove every System V IPC object, as the
        jobs' user (whose files they are); a no-op outside a sandbox of our own."""
        if not self.sweep:
            return
        roots = (*SCRATCH, *more)
        kept = self._kept()
        if not more and _nothing_left(roots, kept):
            return  # the common case: no fork at all

        def clear() -> None:
            for root in roots:
                _empty_dir(root, kept)
            if ipcrm := shutil.which("ipcrm"):
                subprocess.run([ipcrm, "--all"], capture_output=True, check=False)

        run_as(self.user, clear)

    def _kept(self) -> Kept:
        """What the scratch dirs hold that no job wrote: read once, since a pod's mounts are
        fixed when its sandbox starts (nothing in it may mount)."""
        if self._kept_paths is None:
            self._kept_paths = kept_mounts((*SCRATCH, str(self.workspace)))
        return self._kept_paths

    def _watch(self, job: _Job, out_r: int, err_r: int, timeout_s: float) -> None:
        """Watch ``job``: its output pipes read by loop callbacks (:meth:`_output`), its
        timeout a timer, its end the zygote's report (:meth:`_on_exit`)."""
        loop = asyncio.get_running_loop()
        for fd, stream in ((out_r, "stdout"), (err_r, "stderr")):
            os.set_blocking(fd, False)
            job.pipes[fd] = stream
            loop.add_reader(fd, self._output, job, fd)
        job.timer = loop.call_later(timeout_s, self._timed_out, job)
        if (status := self._exits.pop(job.pid, None)) is not None:  # it died at once
            self._on_exit(job.pid, status)

    def _output(self, job: _Job, fd: int) -> None:
        """Forward what the job wrote to ``fd`` (capped); at its end, close it."""
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close_pipe(job, fd)
            if job.status is not None and not job.pipes:
                self._finish(job)
            return
        limit = job.output_limit
        if limit is not None and job.output_sent + len(data) > limit:
            # past the cap the job's output is read and dropped, so it never blocks
            if job.output_sent > limit:
                return
            data = data[: limit - job.output_sent]
            data += f"\n[stoker: output truncated at {limit} bytes]\n".encode()
            job.output_sent = limit + 1
        else:
            job.output_sent += len(data)
        self.send(
            {
                "ev": "output",
                "job": job.id,
                "stream": job.pipes[fd],
                "data": protocol.pack_bytes(data),
            }
        )
        writer = self._writer
        if writer is not None and writer.transport.get_write_buffer_size() > OUTPUT_BACKLOG:
            self._pause_output(job, writer)

    def _pause_output(self, job: _Job, writer: asyncio.StreamWriter) -> None:
        """Stop reading ``job``'s pipes until the runtime has taken the output sent."""
        loop = asyncio.get_running_loop()
        job.paused = True
        for fd in job.pipes:
            loop.remove_reader(fd)

        async def resume() -> None:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await writer.drain()
            job.paused = False
            for fd in job.pipes:
                loop.add_reader(fd, self._output, job, fd)

        self._spawn(resume())

    def _close_pipe(self, job: _Job, fd: int) -> None:
        if job.pipes.pop(fd, None) is not None:
            if not job.paused:
                asyncio.get_running_loop().remove_reader(fd)
            os.close(fd)

    def _timed_out(self, job: _Job) -> None:
        if self.job is job and job.status is None:
            job.kill_failure = job.kill_failure or "timeout"
            self._kill_others()  # its exit is reported as any other

    def _exited(self, job: _Job, status: int) -> None:
        """The zygote reported the job's end: whatever it started and left behind dies with
        it (it may hold the pipes); the job is over once its pipes are read to their end, or
        :data:`LINGER_S` later (a process out of the sweep's reach may hold them). Its
        ``status`` is set only now: the pipes' end finishes the job only after this sweep."""
        if self.job is not job or job.status is not None:
            return  # reported twice (its layer died too): once is enough
        job.status = status
        job.exited_at = time.time()
        if job.timer is not None:
            job.timer.cancel()
        self._kill_others()
        if job.pipes:
            job.timer = asyncio.get_running_loop().call_later(LINGER_S, self._finish, job)
        else:
            self._finish(job)

    def _finish(self, job: _Job) -> None:
        """Report the job's end; the pod is ready for the next."""
        if self.job is not job:
            return  # finished already
        if job.timer is not None:
            job.timer.cancel()
        for fd in list(job.pipes):
            self._close_pipe(job, fd)
        self._clear_scratch()  # only the workspace is kept for the next job
        status = job.status or 0
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + sig
        failure: str | None = job.kill_failure
        if failure is None and code != 0:
            failure = "user_error"
        self.job = None
        self._keep_layer(job.deps)  # before the exit is told: the next bind finds it
        self._record_exit(job.id, code, sig, failure, job.exited_at)
        self.send(self.ran[job.id])
        if self._stop_after_job:
            self._stop.set()

    def _record_exit(
        self, job_id: str, code: int, sig: int, failure: str | None, exited_at: float | None
    ) -> None:
        """Remember how a job ended (a repeated bind is answered with it): ``exited_at`` when
        its process ended, ``at`` now, when its output is drained and the pod is clean."""
        at = time.time()
        self.ran[job_id] = {
            "ev": "exited",
            "job": job_id,
            "exit_code": code,
            "signal": sig,
            "failure": failure,
            "exited_at": at if exited_at is None else exited_at,
            "at": at,
        }
        while len(self.ran) > MAX_RAN:
            self.ran.popitem(last=False)

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
        keep = {1, os.getpid(), self.zygote.pid} | ({self._spare.pid} if self._spare else set())
        if self.layer is not None:
            keep.add(self.layer.pid)
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

    async def _dial_broker(self, host: str, port: int) -> None:
        """Dial the broker's gateway and serve it; redial whenever the connection ends, so a
        broker restart (or a new leader) only pauses the pod. Backoff grows while dials fail
        or connections drop at once (a refused token), and resets after one that held."""
        delay = DIAL_MIN_S
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                reader, writer = await asyncio.open_connection(host, port, limit=protocol.MAX_LINE)
            except OSError as exc:
                print(f"agent: dial {host}:{port}: {exc}", file=sys.stderr)
            else:
                writer.write(protocol.encode({"ev": "auth", "pod": self.pod, "token": self.token}))
                await self._serve(reader, writer)
                if time.monotonic() - t0 > 10 * DIAL_MAX_S:
                    delay = DIAL_MIN_S
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(DIAL_MAX_S, delay * 2)

    async def run(self) -> None:
        """Serve until told to shut down: on the Unix socket, or dialing the broker."""
        server = None if self.dial is not None else await self._listen()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self._on_sigterm)
        loop.add_reader(self.zygote.sock.fileno(), self._zygote_readable)
        self._ensure_spare()
        dialer = asyncio.ensure_future(self._dial_broker(*self.dial)) if self.dial else None
        await self._stop.wait()
        if dialer is not None:
            dialer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await dialer
        if server is not None:
            server.close()
            await server.wait_closed()
        self._drop_layer()
        loop.remove_reader(self.zygote.sock.fileno())
        self._discard_spare()
        self.zygote.close()

    def _on_sigterm(self) -> None:
        """The pod is being stopped (Kubernetes: its Pod deleted, with a grace period): the
        running job gets SIGTERM, so it may checkpoint, and the agent stays until it exits
        (the kubelet SIGKILLs what is left when the grace ends); with no job it stops now."""
        job = self.job
        if job is None:
            self._stop.set()
            return
        job.kill_failure = job.kill_failure or "preempted"
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(job.pid, signal.SIGTERM)  # the job called setsid: its group is its pid
        self._stop_after_job = True

    async def _listen(self) -> asyncio.Server:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        old_umask = os.umask(0o077)  # the socket: the agent's uid only (and root outside)
        try:
            return await asyncio.start_unix_server(
                self._serve, self.socket_path, limit=protocol.MAX_LINE
            )
        finally:
            os.umask(old_umask)


def _scratch(name: str) -> Path:
    """A directory of the agent's own under the pod's temporary directory."""
    return Path(os.environ.get("TMPDIR") or "/tmp") / name


@dataclass(frozen=True, slots=True)
class Kept:
    """What a scrub leaves in the scratch dirs: the mount points below them (host paths
    bound into the pod where they lie on the host, e.g. a venv or checkout under /tmp) and
    the directories the sandbox made to hold them. A scrub never walks into a mount point,
    and walks a holding directory only for what a job may have added beside the mounts."""

    mounts: frozenset[str] = frozenset()
    holders: frozenset[str] = frozenset()


def read_mounts(mountinfo: str = "/proc/self/mountinfo") -> list[tuple[str, str]]:
    """This mount namespace's mounts as (mount point, filesystem type), in mount order;
    none when the table cannot be read."""
    mounts = []
    try:
        with open(mountinfo) as f:
            for line in f:
                fields = line.split()
                if "-" in fields[5:]:  # optional fields end at "-", then the type
                    fstype = fields[fields.index("-", 5) + 1]
                    mounts.append((_unescape(fields[4]), fstype))
    except (OSError, IndexError):
        return []
    return mounts


def kept_mounts(roots: tuple[str, ...], mountinfo: str = "/proc/self/mountinfo") -> Kept:
    """The mount points strictly below ``roots`` in this mount namespace, and the
    directories between each root and them."""
    points = [point for point, _ in read_mounts(mountinfo)]
    mounts: set[str] = set()
    holders: set[str] = set()
    for point in points:
        for root in roots:
            if not point.startswith(root.rstrip("/") + "/"):
                continue
            mounts.add(point)
            parent = os.path.dirname(point)
            while parent != root.rstrip("/") and parent.startswith(root):
                holders.add(parent)
                parent = os.path.dirname(parent)
    return Kept(frozenset(mounts), frozenset(holders - mounts))


def _unescape(field: str) -> str:
    """A mountinfo path field: space, tab, newline and backslash are octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _empty_dir(root: str, kept: Kept) -> None:
    """Remove everything inside ``root`` but what ``kept`` names (what cannot be removed is
    left, silently)."""
    try:
        with os.scandir(root) as it:
            entries = list(it)
    except OSError:
        return
    for entry in entries:
        if entry.path in kept.mounts:
            continue  # a host path bound into the pod: never a job's to lose, nor ours
        if entry.path in kept.holders:
            _empty_dir(entry.path, kept)
        elif entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)


def _nothing_left(roots: tuple[str, ...], kept: Kept) -> bool:
    """Whether ``roots`` hold nothing but ``kept`` and the pod has no System V IPC object
    (the pod's own ipc namespace lists them all in /proc/sysvipc, whoever made them)."""
    try:
        if any(_holds_more(root, kept) for root in roots):
            return False
        return not any(_has_entries(f"/proc/sysvipc/{kind}") for kind in ("shm", "msg", "sem"))
    except OSError:
        return False  # cannot tell: clear


def _holds_more(root: str, kept: Kept) -> bool:
    """Whether ``root`` holds anything ``kept`` does not name (holders searched too)."""
    with os.scandir(root) as it:
        for entry in it:
            if entry.path in kept.mounts:
                continue
            if entry.path not in kept.holders or _holds_more(entry.path, kept):
                return True
    return False


def _has_entries(table: str) -> bool:
    """Whether a /proc table (a header line, then one line per entry) lists anything: its
    first 4 KiB, read raw (this runs after every job)."""
    fd = os.open(table, os.O_RDONLY)
    try:
        head = os.read(fd, 4096)
    finally:
        os.close(fd)
    return head.count(b"\n") > 1
