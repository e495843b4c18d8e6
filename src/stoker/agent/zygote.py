"""The zygote: the agent's interpreter with the profile's modules imported once, forked off
as its own process (:class:`Zygote`) before any runtime connects.

Each job runs in a fork of the zygote, made ahead of time (:class:`Spare`): the child
inherits the warm imports (``torch`` costs seconds to import) and starts from the zygote's
state, which never ran user code and never held a tenant's data (binds go to the agent, not
to the zygote), so no job sees another's globals or finds another's env in its own memory.
A plain argv is exec'd from the same fork. Each job first becomes the pod's job user
(:class:`JobUser`)."""

from __future__ import annotations

import array
import contextlib
import ctypes
import functools
import gc
import importlib
import json
import marshal
import os
import runpy
import select
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from stoker.agent.binding import Entry, unpack_code

_PR_SET_DUMPABLE = 4
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_CAP_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


@functools.cache
def _libc() -> ctypes.CDLL:
    # once per process (inherited by every fork): a job's become() then looks up no library
    return ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


@functools.cache
def _empty_capset() -> Callable[[], int]:
    """``capset`` of no capability at all for this thread, its arguments built once: the
    zygote builds it before it forks (:func:`_prepare_forks`), so no job's fork looks the
    call up or builds its structures again (each new object there costs the fork pages)."""
    data = (ctypes.c_uint32 * 6)()  # two __user_cap_data_struct, all zero
    hdr = _CapHeader(_CAP_VERSION_3, 0)
    # byref keeps hdr and data alive as long as the partial
    return functools.partial(_libc().capset, ctypes.byref(hdr), ctypes.byref(data))


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
        forked from the agent, which still holds the agent's memory. A process that is the
        job's user already (a job forked from a deps layer) only sets ``dumpable``."""
        if os.getresuid() == (self.uid,) * 3 and os.getresgid() == (self.gid,) * 3:
            set_dumpable(dumpable)  # it dropped everything when it became the user
            return
        os.setgroups([])
        os.setresgid(self.gid, self.gid, self.gid)
        os.setresuid(self.uid, self.uid, self.uid)
        # a change between two non-zero uids keeps the permitted set: empty it by hand
        _check(_empty_capset()(), "capset")
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


_MADV_COLLAPSE = 25  # Linux 6.1+
_HUGE_PAGE = 2 << 20


def collapse_huge_pages() -> int:
    """Back this process's private anonymous memory (the heap and anonymous mappings) with
    transparent huge pages now (``MADV_COLLAPSE``); the number of 2 MiB pages made.

    A fork copies one page-table entry per 4 KiB page mapped and the child's exit frees
    them: for an interpreter holding torch (~150 MiB of anonymous memory) that was ~15 ms
    of CPU per job, against ~6 ms once most of it is in 2 MiB pages (a copy-on-write fault
    on a shared huge page still copies 4 KiB only). Called before the zygote is forked, so
    the zygote shares these pages with the agent as before (no memory is added). Best
    effort: a kernel without it (EINVAL) or a range it cannot collapse is left as it is."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    made = 0
    try:
        maps = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return 0
    for line in maps:
        fields = line.split()
        # private, writable, and anonymous (no path) or the heap: file mappings stay as
        # they are (a fork copies nothing of those it has not written)
        if fields[1][:2] != "rw" or fields[1][3] != "p" or fields[5:] not in ([], ["[heap]"]):
            continue
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        start = -(-lo // _HUGE_PAGE) * _HUGE_PAGE
        end = hi // _HUGE_PAGE * _HUGE_PAGE
        if end > start and libc.madvise(start, end - start, _MADV_COLLAPSE) == 0:
            made += (end - start) // _HUGE_PAGE
    return made


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _runs_the_entry(filename: str) -> bool:
    """Whether a frame of ``filename`` is the runner's (this module, runpy, importlib), not
    the job's code."""
    return filename in _RUNNER_FILES or filename.startswith("<frozen importlib.")


def _print_job_traceback(exc: BaseException) -> None:
    """Print ``exc`` to stderr as ``python`` prints its program's: the traceback starts at
    the job's own first frame. The runner's frames above it are no part of the job, and
    their paths are the host's (the sandbox binds stoker's source from there); where the
    runner raised it itself (a ``mod:func`` with no ``func``) only the error is printed,
    as ``python -m`` prints a missing module."""
    tb = exc.__traceback__
    while tb is not None and _runs_the_entry(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)


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
    except BaseException as exc:
        _print_job_traceback(exc)
        return 1


#: where the frames that run an entry come from (runpy is frozen, so no __file__ would do)
_RUNNER_FILES = frozenset(
    f.__code__.co_filename for f in (_run_entry, runpy.run_path, importlib.import_module)
)


def env_change(base: dict[str, str], env: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """What turns environment ``base`` into ``env``: the variables to set, those to unset.

    A job's environment is sent to its spare this way, against the zygote's (which every
    spare inherits): a few variables instead of the whole environment, so the job's fork
    decodes and sets only those (each one set touches memory the fork then copies)."""
    return {k: v for k, v in env.items() if base.get(k) != v}, [k for k in base if k not in env]


def _child(
    entry: Entry,
    env: tuple[dict[str, str], list[str]],
    cwd: str,
    extra_path: tuple[str, ...],
    user: JobUser | None,
    code: str | None,
) -> int:
    """The job, in a forked child whose fds 0, 1 and 2 are /dev/null and its output pipes;
    its exit code. ``env``: the change to the inherited environment (:func:`env_change`).
    Its signal dispositions are the zygote's, made the defaults a program expects
    (:func:`_prepare_forks`).

    It becomes the job's user before anything of the job's is touched: the code archive
    is unpacked with the job's rights (a bad or oversized archive fails the job with a
    message, never the agent)."""
    os.setsid()  # its own session and process group, so a kill reaches its children too
    if user is not None:
        user.become()
    # after become: a process that is not dumpable (the spare was) has a /proc/self of
    # root's, and this write would be refused
    with contextlib.suppress(OSError):  # under memory pressure the job dies, not the agent
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
        try:
            os.write(fd, b"1000")
        finally:
            os.close(fd)
    if code:
        try:
            unpack_code(Path(code), Path(code).name, Path(cwd))
        except Exception as exc:  # OSError, ValueError, EOFError, tarfile's: the job's fault
            os.write(2, f"stoker: code archive refused: {type(exc).__name__}: {exc}\n".encode())
            return 1
    os.chdir(cwd)
    put, unset = env
    for name in unset:
        os.environ.pop(name, None)
    os.environ.update(put)
    if entry.kind == "exec":
        try:
            os.execvp(entry.target, list(entry.argv))  # with os.environ, as set above
        except OSError as exc:
            os.write(2, f"stoker: cannot run {entry.target!r}: {exc.strerror}\n".encode())
            return 127
    sys.path[:0] = [cwd, *extra_path]
    sys.stdin, sys.stdout, sys.stderr = _job_streams()  # unused till now, made by the zygote
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
    base_env: dict[str, str]  # the environment it inherited (its zygote's)

    def start(
        self,
        entry: Entry,
        env: dict[str, str],
        cwd: str,
        extra_path: tuple[str, ...],
        code: str | None = None,
    ) -> None:
        """Hand the spare its job (it runs at once); BrokenPipeError if the spare is gone.

        The job goes as one ``marshal`` record (plain strings, lists and dicts from the
        agent, never from a peer): the fork decodes it with less code, and so touches fewer
        of the pages it shares with the zygote, than it would JSON."""
        put, unset = env_change(self.base_env, env)
        data = marshal.dumps(
            (entry.kind, entry.target, entry.argv, put, unset, cwd, extra_path, code)
        )
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


_JOB_FD = 3  # a spare's read end of its job pipe (fd 0 is /dev/null, 1 and 2 its output)


def _spare_main(user: JobUser | None) -> int:
    """The spare's life: wait for its job on fd 3, run it; its exit code."""
    chunks = []
    while chunk := os.read(_JOB_FD, 1 << 16):
        chunks.append(chunk)
    os.close(_JOB_FD)
    if not chunks:
        return 0  # no job: the agent went away or retired this spare
    kind, target, argv, put, unset, cwd, path, code = marshal.loads(b"".join(chunks))
    return _child(Entry(kind, target, argv), (put, unset), cwd, path, user, code)


def _spare_on(fds: list[int], devnull: int, user: JobUser | None) -> None:
    """A spare's life on the request's three fds (job pipe, stdout, stderr): /dev/null,
    stdout and stderr become fds 0, 1, 2 and the job pipe fd 3 (all of them were 3 or above
    in the zygote, whose own 0-2 are open, so each is moved before its number is reused)."""
    job, out, err = fds
    os.dup2(devnull, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    if job != _JOB_FD:
        os.dup2(job, _JOB_FD)
    os.closerange(_JOB_FD + 1, 1 << 16)
    raise SystemExit(_spare_main(user))


def _layer_main(fd: int, user: JobUser | None, spec: dict[str, list[str]]) -> None:
    """A deps layer's life (forked from the clean zygote onto socket ``fd``): become the
    job's user, never dumpable (its jobs may not trace it), put the job's dependency dirs on
    the path and import its modules (a module that fails is left to the job to import),
    say so, then serve spares as the zygote does."""
    if user is not None:
        user.become(dumpable=False)
    sys.path[:0] = spec["path"]
    env = dict(os.environ)
    done = 0
    for name in spec["modules"]:
        try:
            importlib.import_module(name)
            done += 1
        except BaseException:  # an import that fails (or exits) is the job's to see
            traceback.print_exc()
    if os.environ != env:  # its jobs' environment is told against the zygote's: keep that
        os.environ.clear()
        os.environ.update(env)
    sock = socket.socket(fileno=fd)
    sock.send(f"ready {os.getpid()} {done}".encode(), socket.MSG_NOSIGNAL)
    _zygote_main(sock, user)


def _forked(fn: Callable[[], None], keep: tuple[int, ...]) -> int:
    """Fork a child of the zygote that keeps fds 0-2 and ``keep`` only (not the zygote's
    socket, nor its pidfds) and runs ``fn``; its pid."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            last = 3
            for fd in sorted(keep):
                os.closerange(last, fd)
                last = fd + 1
            os.closerange(last, 1 << 16)
            fn()
            code = 0
        except SystemExit as exc:
            code = _exit_code(exc.code)
        except BaseException:
            with contextlib.suppress(BaseException):
                traceback.print_exc()
        os._exit(code)
    return pid


@functools.cache
def _job_streams() -> tuple[TextIO, TextIO, TextIO]:
    """``sys.stdin``, ``stdout`` and ``stderr`` for a job: text streams on fds 0, 1, 2,
    line-buffered so output streams as it comes. Built once, by the zygote, on what a job
    has there (/dev/null and pipes, so each stream knows it cannot seek), and never used
    by it: every fork starts with them empty, and no job pays for making its own."""
    saved = [os.dup(fd) for fd in (0, 1, 2)]
    devnull = os.open(os.devnull, os.O_RDONLY)
    r, w = os.pipe()
    try:
        for target, fd in ((0, devnull), (1, w), (2, w)):
            os.dup2(fd, target)
        return (
            open(0, closefd=False),
            open(1, "w", buffering=1, closefd=False),
            open(2, "w", buffering=1, closefd=False),
        )
    finally:
        for target, fd in enumerate(saved):  # the zygote's own fds 0-2 back
            os.dup2(fd, target)
        for fd in (*saved, devnull, r, w):
            os.close(fd)


def _prepare_forks() -> None:
    """Done once in a zygote (or a deps layer) before it forks, instead of in every fork:

    - the signal dispositions a job's program expects (SIGPIPE, SIGINT and SIGTERM at their
      defaults: Python ignores SIGPIPE, so a child writing to a closed pipe would otherwise
      get EPIPE errors instead of dying quietly as ``head`` expects); the zygote itself
      sends with MSG_NOSIGNAL, so a closed agent socket is an error it handles, not a
      SIGPIPE that kills it;
    - the job user's ``capset`` call built (:func:`_empty_capset`), and a job's text
      streams (:func:`_job_streams`);
    - every object it holds frozen (``gc.freeze``): a collection in a fork never walks
      (and so never copies the pages of) what it inherited."""
    for sig in (signal.SIGPIPE, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    _empty_capset()
    _job_streams()
    gc.freeze()


_FD_SIZE = array.array("i").itemsize
_FDS_SPACE = socket.CMSG_SPACE(3 * _FD_SIZE)


def _zygote_main(sock: socket.socket, user: JobUser | None) -> None:
    """The zygote's loop: fork a spare onto the three fds of each request (or a deps layer
    onto the one socket of a ``layer`` request), report its pid, and report each child's
    wait status when it exits (it is their parent). Returns when the agent goes away."""
    _prepare_forks()
    devnull = os.open(os.devnull, os.O_RDONLY)
    fd = sock.fileno()
    poll = select.poll()
    poll.register(fd, select.POLLIN)
    children: dict[int, int] = {}  # pidfd -> pid
    try:
        while True:
            for ready, _ in poll.poll():
                if ready == fd:
                    msg, anc, _flags, _addr = sock.recvmsg(1 << 16, _FDS_SPACE)
                    if not msg:
                        return  # the agent went away
                    fds = array.array("i")
                    for _level, _kind, data in anc:  # SCM_RIGHTS: the only kind it gets
                        fds.frombytes(data[: len(data) - len(data) % _FD_SIZE])
                    if msg.startswith(b"layer "):
                        spec = json.loads(msg[6:])
                        pid = _forked(functools.partial(_layer_main, fds[0], user, spec), (fds[0],))
                    else:
                        spare = functools.partial(_spare_on, list(fds), devnull, user)
                        pid = _forked(spare, (*fds, devnull))
                    for passed in fds:
                        os.close(passed)
                    pidfd = os.pidfd_open(pid)
                    children[pidfd] = pid
                    poll.register(pidfd, select.POLLIN)
                    sock.send(b"forked %d 0" % pid, socket.MSG_NOSIGNAL)
                else:
                    poll.unregister(ready)
                    os.close(ready)
                    pid = children.pop(ready)
                    _, status = os.waitpid(pid, 0)
                    sock.send(b"exit %d %d" % (pid, status), socket.MSG_NOSIGNAL)
    except ConnectionError:  # BrokenPipeError, ConnectionResetError
        return  # the agent closed its end: nobody is left to report to


class Zygote:
    """The clean parent of every spare.

    Forked from the agent right after the preload, before any runtime connected, it never
    holds a tenant's data: no bind message, env, secret or output ever passes through its
    memory, so a job (which reads its own memory, inherited from its parent) finds nothing of
    an earlier job there, whichever tenant ran it. It sees only "fork" requests carrying the
    new spare's three pipe fds (SCM_RIGHTS over a SOCK_SEQPACKET pair), answers with the
    spare's pid, and reports each spare's wait status (``on_exit``) when it ends.
    """

    def __init__(
        self,
        user: JobUser | None,
        on_exit: Callable[[int, int], None] | None = None,
        fork: bool = True,
    ) -> None:
        self.on_exit = on_exit  # set by the agent before it asks for the first spare
        self.on_ready: Callable[[], None] | None = None
        self.ready = True
        self.children: set[int] = set()  # spares it forked whose exit is not reported yet
        self._layer = not fork
        self.env = dict(os.environ)  # what its spares inherit (a layer's: its zygote's)
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        if not fork:  # a deps layer: forked by the zygote (see layer)
            self._theirs = theirs
            self.pid = 0
            return
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

    def layer(self, paths: tuple[str, ...], modules: tuple[str, ...]) -> Zygote:
        """A deps layer: a child of this zygote that becomes the job's user, imports
        ``modules`` from ``paths`` (a job's dependency dirs) and then forks spares as a
        zygote does, so jobs of those deps start with them imported. It is not ``ready``
        (``on_ready`` is called) until its imports are done. This zygote stays clean: the
        layer is another process, dropped (closed) when the pod changes hands or deps."""
        layer = Zygote(None, self.on_exit, fork=False)
        layer.ready = False
        layer.env = self.env  # forked from this zygote: its environment
        spec = json.dumps({"path": list(paths), "modules": list(modules)}).encode()
        try:
            socket.send_fds(self.sock, [b"layer " + spec], [layer._theirs.fileno()])
        finally:
            layer._theirs.close()
        layer.pid = self._await_fork()
        return layer

    def _await_fork(self) -> int:
        """Wait for the zygote's answer to a request (the reports before it are handled),
        whether or not the socket blocks (an event loop's reader may have made it not)."""
        while True:
            select.select([self.sock], [], [])
            with contextlib.suppress(BlockingIOError):
                kind, pid = self._next()
                if kind == "forked":
                    return pid

    def _next(self) -> tuple[str, int]:
        """Read one report (BlockingIOError: none yet); exits go to ``on_exit``, readiness
        (a layer's) to ``on_ready``."""
        data = self.sock.recv(64, socket.MSG_DONTWAIT)
        if not data:
            raise ConnectionError("the zygote is gone")
        kind, pid, status = data.decode().split()
        if kind == "exit":
            self.children.discard(int(pid))
            if self.on_exit is not None:
                self.on_exit(int(pid), int(status))
        elif kind == "ready":
            self.ready = True
            if self.on_ready is not None:
                self.on_ready()
        return kind, int(pid)

    def readable(self) -> None:
        """For the event loop's reader: handle one report, if one is still there (a
        :meth:`spare` call in between reads every report that came before its own)."""
        with contextlib.suppress(BlockingIOError):
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
        pid = self._await_fork()
        self.children.add(pid)
        return Spare(pid, ctl_w, out_r, err_r, self.env)

    def close(self) -> None:
        """Let the zygote go (it exits when its socket closes) and reap it (a layer is
        reaped by the zygote that forked it)."""
        self.sock.close()
        if not self._layer:
            os.waitpid(self.pid, 0)
