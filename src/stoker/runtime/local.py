"""The local runtime: pods are bubblewrap sandboxes on this host, each running the agent.

Per pod, under ``<state_dir>/pods/<pod>/``: ``pod.json`` (what a restarted broker needs to
re-adopt it), ``workspace/`` (bound at /workspace), ``sock/agent.sock`` (the agent listens,
the runtime connects), ``agent.log`` and ``info.json`` (bwrap's ``child-pid``: the pid
namespace's init, whose death kills every process in the pod at once). Pods run in their own
session, detached from the broker: closing the runtime leaves them running, and a new
runtime on the same state dir finds them through :meth:`LocalRuntime.live_pods`.

Limits go into per-pod cgroups (:mod:`stoker.runtime.cgroups`); a SIGKILLed job in a pod
whose OOM counter rose is reported as ``out_of_memory``. Run as root, the workspace is a
size-capped tmpfs and the pod's agent and jobs run as two different unprivileged uids.

Every pod the runtime starts is tracked or killed at every step: ``pod.json`` is written
before the sandbox starts (a runtime that dies mid-start leaves a record a successor adopts
or stops), and a pod whose agent hangs up without saying that a newer runtime took it over
is stopped, never forgotten.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import stoker
from stoker.agent import protocol
from stoker.agent.binding import check_env
from stoker.core.model import Failure, StartFault
from stoker.runtime import sandbox, seccomp, workspace_files
from stoker.runtime.agent_link import AgentLink
from stoker.runtime.base import (
    BindRefused,
    JobBinding,
    JobExited,
    JobOutput,
    JobRunning,
    PodDown,
    PodNotStarted,
    PodUp,
    RuntimeEvent,
    RuntimeProfile,
    StartFailed,
    exited_event,
    start_fault,
)
from stoker.runtime.cgroups import PodCgroup
from stoker.runtime.code import CodeStore
from stoker.runtime.envs import EnvBuilder, EnvBuildError, top_level_modules
from stoker.runtime.gpus import GpuDevice, cuda_visible_devices, device_nodes, discover

log = logging.getLogger(__name__)
_EXIT_REPORT_S = 5.0  # how long a killed job's exit report may take to arrive
_POD_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,100}$")
_SRC_ROOT = str(Path(stoker.__file__).resolve().parent.parent)


class LocalRuntimeError(RuntimeError):
    """Base of the local runtime's errors."""


class PodStartError(LocalRuntimeError, PodNotStarted):
    """A pod did not come up; the message ends with the tail of its log."""


class UnknownPod(LocalRuntimeError, KeyError):
    """No live pod with this id in this runtime."""


class PodBusy(LocalRuntimeError):
    """The pod is running a job, or stands by (promote it first)."""


@dataclass(frozen=True, slots=True)
class PodInfo:
    """What the runtime knows of one live pod (for listings and diagnostics)."""

    id: str
    profile: str
    gpus: tuple[str, ...]
    standby: bool
    job: str | None
    init_pid: int  # the sandbox's pid 1 on the host: killing it kills the pod
    workspace: Path
    limits_missing: dict[str, str]  # controller -> why its limit is not applied here
    # what the agent said when this runtime connected: job id -> {"exit_code", "failure"}
    # of the jobs it ran, and the jobs whose exit it held (replayed after its hello)
    ran: dict[str, dict[str, object]] = field(default_factory=dict)
    held: tuple[str, ...] = ()
    # the pod's cgroup on the host: its name, and each controller's (or "v2") directory
    cgroup: str = ""
    cgroup_dirs: dict[str, Path] = field(default_factory=dict)


@dataclass
class _Pod:
    id: str
    profile: RuntimeProfile
    gpus: tuple[str, ...]
    standby: bool
    dir: Path
    cgroup: PodCgroup
    python: str
    outer_pid: int = 0
    init_pid: int = 0  # the sandbox's pid 1, seen from the host
    outer_start: int = -1
    init_start: int = -1
    started_at: float = 0.0
    proc: subprocess.Popen[bytes] | None = None  # None when re-adopted from another broker
    link: AgentLink = field(init=False)
    reader_task: asyncio.Task[None] | None = None
    job: str | None = None
    job_exited: asyncio.Event = field(default_factory=asyncio.Event)  # the bound job's end
    grace_until: float = 0.0  # monotonic: a graceful kill of the job runs until then
    hello: protocol.Message = field(default_factory=dict)  # the agent's, on our connect
    oom_at_bind: int = -1
    stopping: bool = False
    taken_over: bool = False  # the agent said a newer runtime connected
    checkpoint: tuple[str, int] | None = None  # (job, rank) whose checkpoint dir this holds
    # the move of a checkpoint out of the pod: never cut short by a cancelled reader, and
    # awaited by the teardown before it removes the pod's dir
    keeping: asyncio.Task[None] | None = None
    # bumped when the pod is recycled or stopped: an upload begun before never lands in
    # the workspace after (the recycled pod is another caller's)
    generation: int = 0

    def __post_init__(self) -> None:
        self.link = AgentLink(self.id)

    @property
    def socket(self) -> Path:
        return self.dir / "sock" / sandbox.SOCKET_NAME

    def to_json(self) -> dict[str, object]:
        p = self.profile
        return {
            "id": self.id,
            "profile": {
                "name": p.name,
                "packages": list(p.packages),
                "preload": list(p.preload),
                "network": p.network,
                "memory_mb": p.memory_mb,
                "pids_max": p.pids_max,
                "cpus": p.cpus,
                "tmp_mb": p.tmp_mb,
                "workspace_mb": p.workspace_mb,
                "output_mb": p.output_mb,
            },
            "gpus": list(self.gpus),
            "standby": self.standby,
            "cgroup": self.cgroup.to_json(),
            "python": self.python,
            "outer_pid": self.outer_pid,
            "outer_start": self.outer_start,
            "init_pid": self.init_pid,
            "init_start": self.init_start,
            "started_at": self.started_at,
            "checkpoint": list(self.checkpoint) if self.checkpoint else None,
        }


def _start_time(pid: int) -> int:
    """The kernel's start time of ``pid`` (guards against a reused pid); -1 if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return -1
    return int(stat.rpartition(")")[2].split()[19])


def _agent_alive(init_pid: int, init_start: int) -> bool:
    """Whether the sandbox with this init still runs its agent (the init's child)."""
    if init_pid <= 0 or _start_time(init_pid) != init_start:
        return False
    try:
        children = Path(f"/proc/{init_pid}/task/{init_pid}/children").read_text().split()
    except OSError:
        return False
    for child in children:
        try:
            if b"stoker.agent" in Path(f"/proc/{child}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def _empty_dir(root: Path) -> None:
    """Remove everything inside ``root`` (links are removed, never followed)."""
    for child in root.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def _move_all(src: Path, dst: Path) -> None:
    """Move what is in ``src`` into ``dst`` (made where missing, private). Links are moved,
    never followed; the two may be on different filesystems (a tmpfs and the state dir)."""
    items = list(src.iterdir()) if src.is_dir() else []
    if items:
        dst.mkdir(mode=0o700, parents=True, exist_ok=True)
    for item in items:
        shutil.move(item, dst / item.name)


def _keep(pod: str, here: Path, kept: Path) -> None:
    """Move a finished run's checkpoint out of its pod; a failure is logged (the job's exit
    is still told, its next run starts over)."""
    try:
        _move_all(here, kept)
    except OSError as exc:
        log.warning("pod %s: could not keep the checkpoint in %s: %s", pod, kept, exc)


def _is_empty(d: Path) -> bool:
    """Whether directory ``d`` holds nothing (a missing one holds nothing)."""
    try:
        with os.scandir(d) as entries:
            return next(entries, None) is None
    except FileNotFoundError:
        return True


def _restore(kept: Path, here: Path) -> None:
    """Empty the pod's checkpoint dir ``here``, then move what was ``kept`` into it."""
    _empty_dir(here)
    _move_all(kept, here)
    if kept.is_dir():
        kept.rmdir()


def cgroup_prefix(state_dir: Path) -> str:
    """How the cgroups of this state dir's pods are named: ``stoker-<tag>-<pod>-<random>``,
    the tag a digest of the state dir, so what one runtime made can be told from another's
    (a test counts what it left)."""
    tag = hashlib.sha256(str(Path(state_dir).resolve()).encode()).hexdigest()[:8]
    return f"stoker-{tag}-"


def _place_code(archive: Path | None, code_dir: Path) -> None:
    """Leave exactly ``archive`` (a hard link, or a copy across filesystems) in the pod's
    code dir, or nothing."""
    code_dir.mkdir(exist_ok=True)
    for old in code_dir.iterdir():
        if archive is None or old.name != archive.name:
            old.unlink()
    if archive is not None and not (code_dir / archive.name).exists():
        try:
            os.link(archive, code_dir / archive.name)
        except OSError:
            shutil.copyfile(archive, code_dir / archive.name)


def _mount_tmpfs(path: Path, size_mb: int, owner: tuple[int, int]) -> None:
    """A size-capped tmpfs on ``path`` (its pages count against the pod's memory group,
    since the pod writes them)."""
    opts = f"size={size_mb}m,mode=0755,uid={owner[0]},gid={owner[1]},nosuid,nodev"
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", opts, "stoker-workspace", str(path)],
        check=True,
        capture_output=True,
    )


def unmount(path: Path) -> None:
    """Detach the mount at ``path`` if there is one."""
    if os.path.ismount(path):
        # lazily: a process of the pod may still be on its way out
        subprocess.run(["umount", "--lazy", str(path)], check=False, capture_output=True)


def _clear_pod(rec: _Pod) -> None:
    """Remove what is left of a killed pod on the host: its groups, its workspace's tmpfs,
    its directory."""
    rec.cgroup.remove()
    unmount(rec.dir / "workspace")
    unmount(rec.dir / "checkpoint")
    shutil.rmtree(rec.dir, ignore_errors=True)


def _failure(name: object) -> Failure | None:
    return Failure(str(name)) if name else None


class LocalRuntime:
    """Sandboxed pods on this host (implements :class:`stoker.runtime.base.Runtime`)."""

    def __init__(
        self,
        state_dir: Path | str,
        *,
        gpu_slots: int = 0,
        dev_dir: Path | str = "/dev",
        code_cache_dir: Path | str | None = None,
        env_dir: Path | str | None = None,
        find_links: tuple[Path, ...] = (),
        no_index: bool = False,
        index_url: str | None = None,
        extra_index_urls: tuple[str, ...] = (),
        ca_bundle: Path | None = None,
        base_python: str = sys.executable,
        start_timeout_s: float = 60.0,
        recycle: str = "scrub",
        hide: tuple[Path, ...] = (),
        uid: int = 65534,
        gid: int = 65534,
        agent_uid: int = 65533,
        agent_gid: int = 65533,
        build_uid: int = 65532,
    ) -> None:
        self.state_dir = Path(state_dir).resolve()
        self.pods_dir = self.state_dir / "pods"
        self.pods_dir.mkdir(parents=True, exist_ok=True)
        # jobs with a checkpoint kept on disk (an earlier runtime's too): a bind or a drop
        # for any other job costs no disk work, the warm path stays as it was
        ckpts = self.state_dir / "checkpoints"
        self._kept: set[str] = {d.name for d in ckpts.iterdir()} if ckpts.is_dir() else set()
        root = os.geteuid() == 0
        self.code = CodeStore(
            Path(code_cache_dir or self.state_dir / "code"), (uid, gid) if root else None
        )
        self.envs = EnvBuilder(
            Path(env_dir or self.state_dir / "env"),
            base_python=base_python,
            find_links=tuple(find_links),
            no_index=no_index,
            index_url=index_url,
            extra_index_urls=tuple(extra_index_urls),
            ca_bundle=ca_bundle,
            build_user=(build_uid, build_uid) if root else None,
        )
        self.devices: dict[str, GpuDevice] = {d.id: d for d in discover(gpu_slots)}
        # the host's device nodes (elsewhere when the runtime runs in a container)
        self.dev_dir = Path(dev_dir)
        self.start_timeout_s = start_timeout_s
        if recycle not in ("scrub", "restart"):
            raise ValueError(f"recycle: 'scrub' or 'restart', not {recycle!r}")
        self.recycle_mode = recycle
        # as root the pod's agent drops to (agent_uid, agent_gid) and each job to (uid, gid);
        # otherwise everything in the pod keeps the caller's uid
        if root and (uid == agent_uid or uid == 0 or agent_uid == 0):
            raise ValueError("uid: jobs and the agent need two different non-root uids")
        self.drop_to = (agent_uid, agent_gid) if root else None
        self.job_user = (uid, gid) if root else None
        self._bwrap = sandbox.find_bwrap()
        self._pods: dict[str, _Pod] = {}
        self._overlay_modules: dict[tuple[str, tuple[str, ...]], tuple[str, ...]] = {}
        self._events: asyncio.Queue[RuntimeEvent] = asyncio.Queue()
        # never visible in a pod: the runtime's own dirs, and what the caller names (the
        # broker's data dir, with its database and tokens)
        self._hidden = tuple(
            dict.fromkeys(
                [
                    self.state_dir,
                    self.code.root.resolve(),
                    self.envs.root.resolve(),
                    *(Path(h).resolve() for h in hide),
                ]
            )
        )

    # --- events ------------------------------------------------------------

    async def _emit(self, event: RuntimeEvent) -> None:
        await self._events.put(event)

    async def events(self) -> AsyncIterator[RuntimeEvent]:
        """Every event of every pod, in the order they happened."""
        while True:
            yield await self._events.get()

    # --- code --------------------------------------------------------------

    async def put_code(self, data: bytes) -> str:
        return await asyncio.to_thread(self.code.put, data)

    async def drop_code(self, digest: str) -> None:
        await asyncio.to_thread(self.code.remove, digest)

    # --- checkpoints: a job's own directory, kept across its runs ---------------

    def _checkpoints(self, job: str, rank: int) -> Path:
        return self.state_dir / "checkpoints" / job / str(rank)

    async def _checkpoint_in(self, rec: _Pod, binding: JobBinding) -> None:
        """What the job's earlier run left (rank by rank) into this pod's checkpoint dir;
        the pod's dir is emptied first (a pod serves one job at a time)."""
        await self._checkpoint_out(rec)  # an earlier job's, if it is still being kept
        rec.checkpoint = (binding.job, binding.topology.rank)
        here = rec.dir / "checkpoint"
        # a run's exit empties the dir (unless keeping failed): most binds have nothing to do
        if binding.job in self._kept or not _is_empty(here):
            kept = self._checkpoints(*rec.checkpoint)
            await asyncio.to_thread(_restore, kept, here)

    async def _checkpoint_out(self, rec: _Pod) -> None:
        """The job's run ended in this pod: what it left in its checkpoint dir is kept for
        its next run (the broker drops it when the job ends for good)."""
        if rec.checkpoint is not None:
            here, (job, rank) = rec.dir / "checkpoint", rec.checkpoint
            rec.checkpoint = None
            if not _is_empty(here):
                self._kept.add(job)
                task = asyncio.to_thread(_keep, rec.id, here, self._checkpoints(job, rank))
                rec.keeping = asyncio.ensure_future(task)
        if rec.keeping is not None:
            await asyncio.shield(rec.keeping)
            rec.keeping = None

    async def drop_checkpoint(self, job: str, *, job_class: str | None = None) -> None:
        """The job ended for good: its kept checkpoints go (every class keeps them here)."""
        if job in self._kept:
            self._kept.discard(job)
            await asyncio.to_thread(shutil.rmtree, self.state_dir / "checkpoints" / job, True)

    # --- a pod's workspace files, streamed from the host side -------------------

    async def read_file(
        self, pod: str, path: str, max_bytes: int
    ) -> tuple[int, AsyncIterator[bytes]]:
        """The size of ``path`` in ``pod``'s workspace and its bytes, piece by piece (links
        refused, never followed: :mod:`stoker.runtime.workspace_files`)."""
        rec = self._pod(pod)
        fd, size = await asyncio.to_thread(
            workspace_files.open_read, str(rec.dir / "workspace"), path
        )
        if size > max_bytes:
            os.close(fd)
            raise workspace_files.FileTooLarge(
                f"path: {path} is {size} bytes, over the {max_bytes}-byte cap (max_file_bytes)"
            )

        async def chunks() -> AsyncIterator[bytes]:
            try:
                while chunk := await asyncio.to_thread(os.read, fd, workspace_files.CHUNK):
                    yield chunk
            finally:
                os.close(fd)

        return size, chunks()

    async def write_file(
        self, pod: str, path: str, chunks: AsyncIterator[bytes], max_bytes: int
    ) -> int:
        """Put ``chunks`` in ``pod``'s workspace at ``path`` (parents made, the job's uid
        owns them), replacing the file whole once all has arrived; the bytes written. A
        recycle or stop of the pod midway aborts it (UnknownPod), so nothing lands in the
        pod's next caller's workspace."""
        rec = self._pod(pod)
        generation = rec.generation
        fd, dfd, tmp = await asyncio.to_thread(
            workspace_files.open_write, str(rec.dir / "workspace"), path, self.job_user
        )
        size = 0
        try:
            try:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > max_bytes:
                        raise workspace_files.FileTooLarge(
                            f"path: {path} is over the {max_bytes}-byte cap (max_file_bytes)"
                        )
                    await asyncio.to_thread(workspace_files.write_all, fd, chunk)
                    if rec.generation != generation:
                        break
            finally:
                os.close(fd)
            # checked and renamed in one step of the loop: no recycle comes in between
            if rec.generation != generation or self._pods.get(pod) is not rec:
                raise UnknownPod(f"pod {pod}: recycled or stopped during the upload")
            workspace_files.commit(dfd, tmp, path)
        except BaseException:
            workspace_files.abort(dfd, tmp)
            raise
        finally:
            os.close(dfd)
        return size

    # --- pods --------------------------------------------------------------

    def _pod(self, pod: str) -> _Pod:
        rec = self._pods.get(pod)
        if rec is None or rec.stopping:
            raise UnknownPod(f"pod: no live pod {pod!r}")
        return rec

    async def start_pod(
        self,
        pod: str,
        profile: RuntimeProfile,
        gpus: tuple[str, ...],
        standby: bool,
        *,
        job_class: str = "pool",
        checkpoint: tuple[str, int] | None = None,
    ) -> None:
        """Start a sandbox running the agent; returns once it is up (PodUp emitted).
        ``job_class`` changes nothing on one host: the core alone decides who runs here.
        ``checkpoint`` neither: a local pod's checkpoint dir is filled at each bind."""
        if not _POD_ID.match(pod):
            raise ValueError(f"pod: bad pod id {pod!r} (letters, digits, _ . -)")
        if pod in self._pods or (self.pods_dir / pod).exists():
            raise ValueError(f"pod: {pod!r} exists already")
        visible = cuda_visible_devices(self.devices, tuple(gpus))
        try:
            env = await asyncio.to_thread(self.envs.profile_env, tuple(profile.packages))
        except EnvBuildError as exc:
            why = f"pod {pod}: profile {profile.name}: {exc}"
            await self._emit(StartFailed(pod, StartFault.ENV_BUILD_FAILED, why))
            raise PodStartError(why, StartFault.ENV_BUILD_FAILED) from exc
        d = self.pods_dir / pod
        (d / "code").mkdir(parents=True)  # only the bound job's archive, linked at bind
        for sub in ("workspace", "sock", "checkpoint"):
            (d / sub).mkdir(parents=True)
        d.chmod(0o700)
        # unique on the host: pod ids are only unique within one runtime's state dir
        cg_name = f"{cgroup_prefix(self.state_dir)}{pod}-{os.urandom(4).hex()}"
        cg = PodCgroup.create(cg_name, profile.memory_mb, profile.pids_max, profile.cpus)
        rec = _Pod(pod, profile, tuple(gpus), standby, d, cg, env.python)
        self._pods[pod] = rec
        try:
            self._save(rec)  # from here on a successor finds it, whenever this one dies
            self._prepare_dirs(rec)
            await self._spawn(rec, "" if standby else visible)
        except BaseException as exc:
            log = (d / "agent.log").read_text(errors="replace")[-2000:] if d.exists() else ""
            await self._teardown(rec)
            why, fault = f"pod {pod} did not start: {exc}\n{log}", start_fault(exc)
            await self._emit(StartFailed(pod, fault, why))
            raise PodStartError(why, fault) from exc
        await self._emit(PodUp(pod))

    def _save(self, rec: _Pod) -> None:
        """Write the pod's record atomically (never a half-written pod.json)."""
        tmp = rec.dir / "pod.json.tmp"
        tmp.write_text(json.dumps(rec.to_json()))
        tmp.rename(rec.dir / "pod.json")

    def _prepare_dirs(self, rec: _Pod) -> None:
        """The workspace (the jobs' uid's; a size-capped tmpfs where we may mount one) and
        the socket's directory (the agent's uid's alone: no job may connect or leave files
        there)."""
        ws, sock, ckpt = rec.dir / "workspace", rec.dir / "sock", rec.dir / "checkpoint"
        if self.job_user is not None and self.drop_to is not None:
            # the checkpoint dir has the workspace's cap too: what a job keeps across its
            # runs is bounded like what it may write in one
            for d in (ws, ckpt) if rec.profile.workspace_mb else ():
                try:
                    _mount_tmpfs(d, rec.profile.workspace_mb, self.job_user)
                except (OSError, subprocess.CalledProcessError) as exc:
                    rec.cgroup.missing[d.name] = f"tmpfs on the {d.name} dir: {exc}"
            os.chown(ws, *self.job_user)
            os.chown(ckpt, *self.job_user)
            os.chown(sock, *self.drop_to)
        elif rec.profile.workspace_mb:
            rec.cgroup.missing["workspace"] = "no size cap: mounting a tmpfs needs root"
        sock.chmod(0o700)
        ckpt.chmod(0o700)

    def _sandbox_command(self, rec: _Pod, visible: str, info_fd: int, sc_fd: int) -> list[str]:
        py_bin = os.path.dirname(rec.python)
        env = {
            "PATH": f"{py_bin}:/usr/local/bin:/usr/bin:/bin",
            "HOME": sandbox.WORKSPACE,
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "PYTHONPATH": _SRC_ROOT,
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            "CUDA_VISIBLE_DEVICES": visible,
            # the pod's GPU ids (virtual slots too); empty while it stands by
            "STOKER_GPUS": "" if rec.standby else ",".join(rec.gpus),
            "STOKER_POD": rec.id,
        }
        devices = device_nodes(self.devices, rec.gpus, self.dev_dir)
        argv = (rec.python, "-m", "stoker.agent", "--pod", rec.id, "--sandboxed")
        argv += ("--socket", f"{sandbox.SOCK_DIR}/{sandbox.SOCKET_NAME}")
        argv += ("--workspace", sandbox.WORKSPACE, "--preload", ",".join(rec.profile.preload))
        if self.job_user is not None:
            argv += ("--job-uid", str(self.job_user[0]), "--job-gid", str(self.job_user[1]))
        spec = sandbox.SandboxSpec(
            argv=argv,
            binds=sandbox.pod_binds(
                rec.dir / "workspace",
                rec.dir / "sock",
                rec.dir / "code",
                self.envs.overlay_root,
                rec.dir / "checkpoint",
            ),
            env=env,
            hide=self._hidden,
            expose=self._expose_for(rec.python),
            network=rec.profile.network,
            hostname="pod",  # not the pod id: a pod scrubbed in place gets a new one
            info_fd=info_fd,
            drop_to=self.drop_to,
            agent_caps=self.drop_to is not None,
            devices=devices,
            seccomp_fd=sc_fd,
            tmp_mb=rec.profile.tmp_mb,
            cgroups=rec.cgroup.view(),
        )
        return sandbox.build_command(spec, self._bwrap)

    def _expose_for(self, python: str) -> tuple[Path, ...]:
        """What the pod's interpreter needs to see: its env, its base install, our source."""
        out = [Path(sys.base_prefix), Path(sys.prefix), Path(_SRC_ROOT)]
        env_root = Path(python).parent.parent
        out.append(env_root)
        with contextlib.suppress(OSError):
            out.append(Path(os.path.realpath(python)).parent.parent)
        return tuple(dict.fromkeys(p.resolve() for p in out))

    async def _spawn(self, rec: _Pod, visible: str) -> None:
        info_path = rec.dir / "info.json"
        sc_fd = seccomp.program_fd()  # one per sandbox: bwrap reads it from its offset
        try:
            with open(info_path, "wb") as info, open(rec.dir / "agent.log", "ab") as log:
                cmd = self._sandbox_command(rec, visible, info.fileno(), sc_fd)
                rec.started_at = time.time()
                # the sandbox is born inside the pod's cgroup: every process it makes counts
                rec.proc = subprocess.Popen(
                    rec.cgroup.exec_inside(cmd),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    pass_fds=(info.fileno(), sc_fd),
                    start_new_session=True,  # detached: a broker's death does not reach it
                )
        finally:
            os.close(sc_fd)
        rec.outer_pid = rec.proc.pid
        rec.outer_start = _start_time(rec.outer_pid)
        self._save(rec)
        deadline = time.monotonic() + self.start_timeout_s
        while not rec.socket.exists():
            if rec.proc.poll() is not None:
                raise PodStartError(f"sandbox exited with {rec.proc.returncode}")
            if time.monotonic() > deadline:
                raise PodStartError(
                    f"no agent after {self.start_timeout_s} s", StartFault.START_TIMED_OUT
                )
            await asyncio.sleep(0.002)
        info_text = info_path.read_text()
        rec.init_pid = int(json.loads(info_text)["child-pid"])
        rec.init_start = _start_time(rec.init_pid)
        self._save(rec)
        await self._connect(rec, deadline)

    async def _connect(self, rec: _Pod, deadline: float) -> protocol.Message:
        """Connect to the pod's agent and wait for its hello."""
        while True:
            try:
                reader, writer = await protocol.open_connection(str(rec.socket))
                break
            except (ConnectionRefusedError, FileNotFoundError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.002)
        hello = await asyncio.wait_for(
            protocol.read_message(reader), max(0.1, deadline - time.monotonic())
        )
        if hello is None or hello.get("ev") != "hello":
            raise PodStartError(f"agent said {hello!r} instead of hello")
        rec.link.attach(writer)
        rec.hello = hello
        rec.job = hello.get("job")
        rec.reader_task = asyncio.get_running_loop().create_task(self._read(rec, reader))
        return hello

    async def _read(self, rec: _Pod, reader: asyncio.StreamReader) -> None:
        """Turn the agent's events into runtime events until the connection ends."""
        try:
            while (msg := await protocol.read_message(reader)) is not None:
                await self._on_message(rec, msg)
        except (ConnectionError, protocol.ProtocolError):
            pass
        if rec.stopping or self._pods.get(rec.id) is not rec:
            return
        rec.stopping = True
        job = rec.job
        if rec.taken_over and _agent_alive(rec.init_pid, rec.init_start):
            # a newer runtime (a restarted broker on the same state dir) connected and the
            # agent told us so: the pod is that runtime's now, never kill it
            self._pods.pop(rec.id, None)
        else:
            # the agent died or hung up unasked: the pod is broken, and so is its job; it
            # is stopped, never left running untracked
            await self._teardown(rec)
        if job is not None:
            await self._emit(JobExited(job, rec.id, 137, Failure.POD_DIED))
        await self._emit(PodDown(rec.id, Failure.POD_DIED))

    async def _on_message(self, rec: _Pod, msg: protocol.Message) -> None:
        ev = msg.get("ev")
        if ev == "output":
            data = protocol.unpack_bytes(msg["data"])
            await self._emit(JobOutput(msg["job"], rec.id, msg["stream"], data))
        elif ev == "running":
            await self._emit(JobRunning(msg["job"], rec.id))
        elif ev == "taken_over":
            rec.taken_over = True
        elif ev == "exited":
            failure = _failure(msg.get("failure"))
            if (
                msg.get("signal") == signal.SIGKILL
                and failure in (None, Failure.USER_ERROR)
                and rec.cgroup.oom_kills() > rec.oom_at_bind
            ):
                failure = Failure.OUT_OF_MEMORY
            # kept before the exit is told: a stop waiting for the exit then finds it kept
            await self._checkpoint_out(rec)
            if rec.job == msg["job"]:
                rec.job = None
                rec.job_exited.set()
            await self._emit(exited_event(msg, rec.id, failure))
        elif ev == "error" and msg.get("job"):
            job = msg["job"]
            if rec.job == job:
                rec.job = None
            text = f"stoker: job could not be bound: {msg.get('message')}\n".encode()
            await self._emit(JobOutput(job, rec.id, "stderr", text))
            await self._emit(JobExited(job, rec.id, 1, Failure.USER_ERROR))
        else:  # a reply, or a refused request: whoever waits gets it
            rec.link.answer(msg)

    async def promote(self, pod: str) -> None:
        """Give a standby pod its GPUs (CUDA_VISIBLE_DEVICES for its jobs); emits PodUp."""
        rec = self._pod(pod)
        visible = cuda_visible_devices(self.devices, rec.gpus)
        msg = {"op": "promote", "cuda_visible_devices": visible, "gpus": list(rec.gpus)}
        await rec.link.request(msg, "promoted")
        rec.standby = False
        self._save(rec)
        await self._emit(PodUp(pod))

    def pod_info(self, pod: str) -> PodInfo:
        """The runtime's view of a live pod."""
        rec = self._pod(pod)
        return PodInfo(
            rec.id,
            rec.profile.name,
            rec.gpus,
            rec.standby,
            rec.job,
            rec.init_pid,
            rec.dir / "workspace",
            dict(rec.cgroup.missing),
            dict(rec.hello.get("ran") or {}),
            tuple(rec.hello.get("held") or ()),
            rec.cgroup.name,
            dict(rec.cgroup.dirs),
        )

    async def ping(self, pod: str) -> protocol.Message:
        """The agent's own view of its pod (pid, CUDA_VISIBLE_DEVICES, preload times, job)."""
        return await self._pod(pod).link.request({"op": "ping"}, "pong")

    async def bind(self, pod: str, binding: JobBinding) -> None:
        """Bind and start a job; JobRunning (or a JobExited for a bad binding) follows.
        BindRefused: the job's own env or code digest is bad (anything else raised here is
        this runtime's fault)."""
        rec = self._pod(pod)
        if rec.job is not None and rec.job != binding.job:  # the same job: the agent answers
            raise PodBusy(f"pod: {pod} is running job {rec.job}")
        if rec.standby:
            raise PodBusy(f"pod: {pod} stands by; promote it before binding")
        code = None
        try:
            check_env(dict(binding.env))
            if binding.code_digest:
                # CodeNotFound names the field; the pod sees this archive and no other
                archive = self.code.path(binding.code_digest)
                await asyncio.to_thread(_place_code, archive, rec.dir / "code")
                code = f"{sandbox.CODE_DIR}/{binding.code_digest}"
        except (ValueError, KeyError) as exc:
            raise BindRefused(str(exc)) from exc
        rec.job = binding.job
        rec.job_exited = asyncio.Event()
        rec.grace_until = 0.0
        await self._checkpoint_in(rec, binding)
        self._save(rec)  # a successor that adopts this pod keeps the job's checkpoint
        overlay: list[str] = []
        imports: tuple[str, ...] = ()
        if binding.deps:
            try:
                digest = await asyncio.to_thread(self.envs.overlay, binding.deps, rec.python)
                imports = await asyncio.to_thread(self._imports, digest, binding.deps)
            except EnvBuildError as exc:
                rec.job = None
                text = f"stoker: deps {list(binding.deps)} failed: {exc}\n".encode()
                await self._emit(JobOutput(binding.job, pod, "stderr", text))
                await self._emit(JobExited(binding.job, pod, 1, Failure.USER_ERROR))
                return
            overlay.append(f"{sandbox.OVERLAY_DIR}/{digest}")
        rec.oom_at_bind = rec.cgroup.oom_kills()
        msg = binding.message(code, overlay, rec.profile.output_mb, imports=imports)
        line = protocol.encode(msg)
        if len(line) >= protocol.MAX_LINE:  # the agent would drop the connection
            rec.job = None
            text = f"stoker: argv and env too large ({len(line)} bytes encoded)\n".encode()
            await self._emit(JobOutput(binding.job, pod, "stderr", text))
            await self._emit(JobExited(binding.job, pod, 1, Failure.USER_ERROR))
            return
        await rec.link.send(msg)

    def _imports(self, digest: str, deps: tuple[str, ...]) -> tuple[str, ...]:
        """The modules of overlay ``digest`` a pod's deps layer preloads (read once)."""
        key = (digest, deps)
        if key not in self._overlay_modules:
            root = self.envs.overlay_root / digest
            self._overlay_modules[key] = top_level_modules(root, deps)
        return self._overlay_modules[key]

    async def kill_job(
        self, job: str, failure: Failure = Failure.CANCELLED, grace_s: float = 0.0
    ) -> None:
        """Kill a running job (a job that already ended is left alone): SIGTERM, then SIGKILL
        after ``grace_s`` (at once without one); its JobExited carries ``failure``."""
        for rec in self._pods.values():
            if rec.job == job and not rec.stopping:
                if grace_s > 0:
                    rec.grace_until = time.monotonic() + grace_s
                msg = {"op": "kill", "job": job, "failure": failure.value, "grace_s": grace_s}
                await rec.link.send(msg)  # every rank: a multi-worker job has one per pod

    async def _teardown(self, rec: _Pod) -> None:
        """Kill the whole pod, reap it, and remove its cgroup and directory (workspace too)."""
        rec.stopping = True
        rec.generation += 1  # an upload in flight is not put in place
        rec.link.hang_up()
        if rec.reader_task is not None and rec.reader_task is not asyncio.current_task():
            rec.reader_task.cancel()
        # the pid namespace's init: when it dies the kernel kills everything inside
        for pid, start in ((rec.init_pid, rec.init_start), (rec.outer_pid, rec.outer_start)):
            if pid and _start_time(pid) == start:  # never a reused pid
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        try:
            await asyncio.to_thread(rec.cgroup.kill_all)
            if rec.proc is not None:
                await asyncio.to_thread(rec.proc.wait)
            await self._checkpoint_out(rec)  # before the dir goes
            await asyncio.to_thread(_clear_pod, rec)
        except BaseException:
            _clear_pod(rec)  # cancelled midway: still no mount, group or directory left
            raise
        finally:
            self._pods.pop(rec.id, None)

    async def stop_pod(self, pod: str) -> None:
        """Stop a pod and everything in it; emits PodDown(pod) (and PREEMPTED for its job).
        A job being killed with a grace (``kill_job``) is given the rest of it first, so a
        pod stopped right after its job's graceful kill does not cut the checkpoint short."""
        rec = self._pod(pod)
        left = rec.grace_until - time.monotonic()
        if rec.job is not None and left > 0:
            # the agent SIGKILLs at the grace's end; its exit report follows within moments
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(rec.job_exited.wait(), left + _EXIT_REPORT_S)
        job = rec.job
        await self._teardown(rec)
        if job is not None:
            await self._emit(JobExited(job, pod, 137, Failure.PREEMPTED))
        await self._emit(PodDown(pod))

    async def recycle(self, pod: str, new_pod: str) -> None:
        """Make ``pod`` a clean pod named ``new_pod``; emits PodUp(new_pod).

        ``recycle="scrub"`` (the default) keeps the sandbox and its zygote, which never ran
        user code: the agent kills every other process, empties /tmp, /dev/shm, the workspace
        and System V IPC, then the runtime wipes the workspace again and renames the pod.
        ``recycle="restart"`` (or a pod with a running job) kills the whole sandbox and
        starts a fresh one: every process killed, workspace wiped, agent restarted.
        """
        rec = self._pod(pod)
        if (
            not _POD_ID.match(new_pod)
            or new_pod in self._pods
            or (self.pods_dir / new_pod).exists()
        ):
            raise ValueError(f"new_pod: bad or existing pod id {new_pod!r}")
        rec.generation += 1  # an upload in flight is not put in the next caller's pod
        if self.recycle_mode == "scrub" and rec.job is None:
            reply = await rec.link.request({"op": "scrub", "pod": new_pod}, "scrubbed")
            if reply.get("pod") == new_pod:
                await asyncio.to_thread(_empty_dir, rec.dir / "workspace")
                await asyncio.to_thread(_place_code, None, rec.dir / "code")
                new_dir = self.pods_dir / new_pod
                rec.dir.rename(new_dir)  # the sandbox's binds follow the inodes
                del self._pods[pod]
                rec.id, rec.dir = new_pod, new_dir
                rec.link.pod = new_pod
                self._pods[new_pod] = rec
                self._save(rec)
                await self._emit(PodUp(new_pod))
                return
        job = rec.job
        await self._teardown(rec)
        if job is not None:
            await self._emit(JobExited(job, pod, 137, Failure.PREEMPTED))
        await self.start_pod(new_pod, rec.profile, rec.gpus, rec.standby)

    # --- re-adoption and shutdown ----------------------------------------

    async def live_pods(self) -> list[str]:
        """Pods alive on this host; ones started by an earlier runtime are re-adopted, and
        what it left half-started is stopped and cleared."""
        for d in sorted(self.pods_dir.iterdir()):
            if d.name in self._pods or not d.is_dir():
                continue
            try:
                data = json.loads((d / "pod.json").read_text())
            except (OSError, ValueError):
                # died before its record: no process was started yet
                for sub in ("workspace", "checkpoint"):
                    await asyncio.to_thread(unmount, d / sub)
                await asyncio.to_thread(shutil.rmtree, d, True)
                continue
            await self._adopt(data, d)
        return sorted(p for p, rec in self._pods.items() if not rec.stopping)

    async def _adopt(self, data: dict[str, object], d: Path) -> None:
        prof = data["profile"]
        assert isinstance(prof, dict)
        profile = RuntimeProfile(
            name=str(prof["name"]),
            packages=tuple(prof["packages"]),
            preload=tuple(prof["preload"]),
            network=bool(prof["network"]),
            memory_mb=prof["memory_mb"],
            pids_max=prof["pids_max"],
            cpus=prof.get("cpus"),
            tmp_mb=prof.get("tmp_mb"),
            workspace_mb=prof.get("workspace_mb"),
            output_mb=prof.get("output_mb"),
        )
        cg_data = data["cgroup"]
        assert isinstance(cg_data, dict)
        gpus = data["gpus"]
        assert isinstance(gpus, list)
        rec = _Pod(
            str(data["id"]),
            profile,
            tuple(str(g) for g in gpus),
            bool(data["standby"]),
            d,
            PodCgroup.from_json(cg_data),
            str(data["python"]),
            outer_pid=int(str(data["outer_pid"])),
            init_pid=int(str(data["init_pid"])),
            started_at=float(str(data["started_at"])),
            outer_start=int(str(data["outer_start"])),
            init_start=int(str(data["init_start"])),
        )
        kept = data.get("checkpoint")
        if isinstance(kept, list) and len(kept) == 2:
            rec.checkpoint = (str(kept[0]), int(kept[1]))
        self._pods[rec.id] = rec
        alive = rec.init_pid > 0 and _start_time(rec.init_pid) == rec.init_start
        if alive:
            try:
                await self._connect(rec, time.monotonic() + 5.0)
                return
            except (OSError, TimeoutError, PodStartError):
                pass
        # found dead (or deaf): clear what is left of it
        await self._teardown(rec)

    async def close(self) -> None:
        """Disconnect from every agent; the pods keep running for the next runtime."""
        for rec in list(self._pods.values()):
            rec.stopping = True  # not a death: do not report PodDown
            rec.link.hang_up()
            if rec.reader_task is not None:
                rec.reader_task.cancel()
        self._pods.clear()

    async def stop_all(self) -> None:
        """Stop every pod (PodDown for each), at once: no job's grace is waited for."""
        for rec in self._pods.values():
            rec.grace_until = 0.0
        for pod in sorted(self._pods):
            rec = self._pods.get(pod)  # a stop under way meanwhile may have removed it
            if rec is not None and not rec.stopping:
                await self.stop_pod(pod)
