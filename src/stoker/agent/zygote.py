"""The zygote: the agent's interpreter with the profile's modules imported once, forked off
as its own process (:class:`Zygote`) before any runtime connects.

Each job runs in a fork of the zygote, made ahead of time (:class:`Spare`): the child
inherits the warm imports (``torch`` costs seconds to import) and starts from the zygote's
state, which never ran user code and never held a tenant's data (binds go to the agent, not
to the zygote), so no job sees another's globals or finds another's env in its own memory.
A plain argv is exec'd from the same fork. Each job first becomes the pod's job user
(:class:`JobUser`)."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import json
import os
import runpy
import selectors
import signal
import socket
import sys
import tarfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from stoker.agent.binding import Entry, unpack_code

_PR_SET_DUMPABLE = 4
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_CAP_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def set_dumpable(on: bool) -> None:
    """PR_SET_DUMPABLE: off, no process of another uid (nor one without CAP_SYS_PTRACE)
    may attach to this one or open its /proc/<pid>/mem, and its /proc files are root's."""
    _check(_libc().prctl(_PR_SET_DUMPABLE, int(on), 0, 0, 0), "prctl(PR_SET_DUMPABLE)")


def clear_ambient_caps() -> None:
    """Forget the ambient capabilities the agent was started with, so nothing it execs
    inherits them (it keeps its own permitted ones)."""
    _check(
        _libc().prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0),
        "prctl(PR_CAP_AMBIENT_CLEAR_ALL)",
    )


@dataclass(frozen=True, slots=True)
class JobUser:
    """The uid and gid a pod's jobs run as: never the agent's, so a job can neither signal,
    trace nor read the agent or its spare."""

    uid: int
    gid: int

    def become(self, dumpable: bool = True) -> None:
        """Irrevocably switch this process to the job's uid, with no capability left;
        ``dumpable`` for a job (its own processes may inspect each other), not for a helper
        forked from the agent, which still holds the agent's memory."""
        os.setgroups([])
        os.setresgid(self.gid, self.gid, self.gid)
        os.setresuid(self.uid, self.uid, self.uid)
        # a change between two non-zero uids keeps the permitted set: empty it by hand
        data = (ctypes.c_uint32 * 6)()  # two __user_cap_data_struct, all zero
        hdr = _CapHeader(_CAP_VERSION_3, 0)
        _check(_libc().capset(ctypes.byref(hdr), ctypes.byref(data)), "capset")
        set_dumpable(dumpable)


def run_as(user: JobUser | None, fn: Callable[[], None]) -> int:
    """Run ``fn`` in a forked child that became ``user`` first; its exit status."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            if user is not None:
                user.become(dumpable=False)
            fn()
            code = 0
        except BaseException:
            traceback.print_exc()
        os._exit(code)
    return os.waitpid(pid, 0)[1]


def preload(modules: tuple[str, ...]) -> dict[str, float]:
    """Import ``modules`` once; seconds each took. Never touches CUDA (zero VRAM)."""
    took: dict[str, float] = {}
    for name in modules:
        t0 = time.perf_counter()
        importlib.import_module(name)
        took[name] = time.perf_counter() - t0
    return took


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _run_entry(entry: Entry) -> int:
    """Run ``entry`` in this (forked) interpreter; its exit code."""
    try:
        if entry.kind == "module":
            sys.argv = list(entry.argv)
            runpy.run_module(entry.target, run_name="__main__", alter_sys=True)
        elif entry.kind == "script":
            sys.argv = list(entry.argv)
            sys.path.insert(0, os.path.dirname(os.path.abspath(entry.target)))
            runpy.run_path(entry.target, run_name="__main__")
        elif entry.kind == "code":
            sys.argv = list(entry.argv)
            exec(compile(entry.target, "<string>", "exec"), {"__name__": "__main__"})
        else:  # call
            mod, func = entry.target.split(":")
            sys.argv = list(entry.argv)
            result = getattr(importlib.import_module(mod), func)()
            return _exit_code(result)
        return 0
    except SystemExit as exc:
        return _exit_code(exc.code)
    except BaseException:
        traceback.print_exc()
        return 1


def _child(
    entry: Entry,
    env: dict[str, str],
    cwd: str,
    extra_path: tuple[str, ...],
    user: JobUser | None,
    code: str | None,
) -> int:
    """The job, in a forked child whose fds 1 and 2 are its output pipes; its exit code.

    It becomes the job's user before anything of the job's is touched: the code archive
    is unpacked with the job's rights (a bad or oversized archive fails the job with a
    message, never the agent)."""
    os.setsid()  # its own session and process group, so a kill reaches its children too
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    try:
        with open("/proc/self/oom_score_adj", "w") as fh:
            fh.write("1000")  # under memory pressure the job dies, not the agent
    except OSError:
        pass
    if user is not None:
        user.become()
    if code:
        try:
            unpack_code(Path(code), Path(code).name, Path(cwd))
        except (OSError, ValueError, tarfile.TarError, EOFError) as exc:
            os.write(2, f"stoker: code archive refused: {type(exc).__name__}: {exc}\n".encode())
            return 1
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.chdir(cwd)
    if entry.kind == "exec":
        try:
            os.execvpe(entry.target, list(entry.argv), env)
        except OSError as exc:
            os.write(2, f"stoker: cannot run {entry.target!r}: {exc.strerror}\n".encode())
            return 127
    os.environ.clear()
    os.environ.update(env)
    sys.path[:0] = [cwd, *extra_path]
    # fresh text streams on the job's fds, line-buffered so output streams as it comes
    sys.stdin = open(0, closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    code = _run_entry(entry)
    sys.stdout.flush()
    sys.stderr.flush()
    return code


@dataclass
class Spare:
    """A child forked ahead of time (by the :class:`Zygote`), waiting for its job on a pipe.

    Forking an interpreter that holds torch costs ~10 ms (page tables) and would sit between
    a bind and its job running; the agent has the next spare forked while a job runs, so a
    bind only writes the job to a pipe. A spare sees EOF (and exits) if the agent dies.
    """

    pid: int
    ctl: int  # write end: the job's description, then close
    stdout: int  # read ends of the job's output pipes
    stderr: int

    def start(
        self,
        entry: Entry,
        env: dict[str, str],
        cwd: str,
        extra_path: tuple[str, ...],
        code: str | None = None,
    ) -> None:
        """Hand the spare its job (it runs at once); BrokenPipeError if the spare is gone."""
        spec = {
            "kind": entry.kind,
            "target": entry.target,
            "argv": list(entry.argv),
            "env": env,
            "cwd": cwd,
            "path": list(extra_path),
            "code": code,
        }
        data = json.dumps(spec).encode()
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.ctl, view) :]
        finally:
            os.close(self.ctl)

    def retire(self) -> None:
        """Let an unused spare go (it exits on EOF)."""
        os.close(self.ctl)
        os.close(self.stdout)
        os.close(self.stderr)


def _spare_main(user: JobUser | None) -> int:
    """The spare's life: fds 0, 1, 2 are its job pipe and output pipes; its exit code."""
    gc.freeze()  # the zygote's objects are never collected (nor their fds closed)
    chunks = []
    while chunk := os.read(0, 1 << 16):
        chunks.append(chunk)
    if not chunks:
        return 0  # no job: the agent went away or retired this spare
    spec = json.loads(b"".join(chunks))
    entry = Entry(spec["kind"], spec["target"], tuple(spec["argv"]))
    return _child(entry, spec["env"], spec["cwd"], tuple(spec["path"]), user, spec.get("code"))


def _zygote_main(sock: socket.socket, user: JobUser | None) -> None:
    """The zygote's loop: fork a spare onto the three fds of each request, report its pid,
    and report each spare's wait status when it exits (it is the spares' parent)."""
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            if key.fileobj is sock:
                msg, fds, _flags, _addr = socket.recv_fds(sock, 64, 3)
                if not msg:
                    return  # the agent went away
                pid = os.fork()
                if pid == 0:  # the spare
                    code = 1
                    try:
                        for i, fd in enumerate(fds):
                            os.dup2(fd, i)
                        os.closerange(3, 1 << 16)  # the zygote's socket and pidfds
                        code = _spare_main(user)
                    except BaseException:
                        with contextlib.suppress(BaseException):
                            traceback.print_exc()
                    os._exit(code)
                for fd in fds:
                    os.close(fd)
                sel.register(os.pidfd_open(pid), selectors.EVENT_READ, pid)
                sock.send(f"forked {pid} 0".encode())
            else:
                sel.unregister(key.fileobj)
                os.close(key.fd)
                _, status = os.waitpid(key.data, 0)
                sock.send(f"exit {key.data} {status}".encode())


class Zygote:
    """The clean parent of every spare.

    Forked from the agent right after the preload, before any runtime connected, it never
    holds a tenant's data: no bind message, env, secret or output ever passes through its
    memory, so a job (which reads its own memory, inherited from its parent) finds nothing of
    an earlier job there, whichever tenant ran it. It sees only "fork" requests carrying the
    new spare's three pipe fds (SCM_RIGHTS over a SOCK_SEQPACKET pair), answers with the
    spare's pid, and reports each spare's wait status (``on_exit``) when it ends.
    """

    def __init__(self, user: JobUser | None, on_exit: Callable[[int, int], None]) -> None:
        self.on_exit = on_exit
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                self.sock.close()
                _zygote_main(theirs, user)
            except BaseException:
                traceback.print_exc()
                code = 1
            os._exit(code)
        theirs.close()
        self.pid = pid

    def _next(self) -> tuple[str, int]:
        """Read one report; exits go to ``on_exit``."""
        data = self.sock.recv(64)
        if not data:
            raise ConnectionError("the zygote is gone")
        kind, pid, status = data.decode().split()
        if kind == "exit":
            self.on_exit(int(pid), int(status))
        return kind, int(pid)

    def readable(self) -> None:
        """For the event loop's reader: handle one report."""
        self._next()

    def spare(self) -> Spare:
        """A new spare (forked at once by the zygote)."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        ctl_r, ctl_w = os.pipe()
        try:
            socket.send_fds(self.sock, [b"fork"], [ctl_r, out_w, err_w])
        finally:
            for fd in (ctl_r, out_w, err_w):
                os.close(fd)
        while True:
            kind, pid = self._next()
            if kind == "forked":
                return Spare(pid, ctl_w, out_r, err_r)

    def close(self) -> None:
        """Let the zygote go (it exits when its socket closes) and reap it."""
        self.sock.close()
        os.waitpid(self.pid, 0)
