"""A LocalRuntime and one reader of its events, shared by the runtime and isolation tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stoker.broker.bench import pure_wheel
from stoker.runtime.base import (
    JobBinding,
    JobExited,
    JobOutput,
    JobRunning,
    PodUp,
    RuntimeEvent,
    RuntimeProfile,
)
from stoker.runtime.local import LocalRuntime

PLAIN = RuntimeProfile("plain")


def tiny_wheel(where: Path, name: str, value: str, init: str | None = None) -> Path:
    """A tiny pure-Python wheel: its package sets ``VALUE = value`` (or its ``__init__.py``
    is ``init``)."""
    return pure_wheel(where, name, f"VALUE = {value!r}\n" if init is None else init)


@dataclass
class Result:
    exit: JobExited
    stdout: bytes = b""
    stderr: bytes = b""
    running: bool = False


@dataclass
class Rig:
    """A runtime and one reader of its events."""

    rt: LocalRuntime
    events: AsyncIterator[RuntimeEvent]
    seen: list[RuntimeEvent] = field(default_factory=list)

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, state_dir: Path, **kw: Any) -> AsyncIterator[Rig]:
        """A rig on a new LocalRuntime(state_dir, **kw) whose pods all stop at the end."""
        rt = LocalRuntime(state_dir, **kw)
        try:
            yield cls(rt, rt.events())
        finally:
            await rt.stop_all()

    async def next(self, timeout: float = 45.0) -> RuntimeEvent:
        ev = await asyncio.wait_for(anext(self.events), timeout)
        self.seen.append(ev)
        return ev

    async def until(self, kind: type, timeout: float = 45.0) -> RuntimeEvent:
        while True:
            ev = await self.next(timeout)
            if isinstance(ev, kind):
                return ev

    async def collect(self, job: str, timeout: float = 45.0) -> Result:
        out, err, running = [], [], False
        while True:
            ev = await self.next(timeout)
            if isinstance(ev, JobRunning) and ev.job == job:
                running = True
            elif isinstance(ev, JobOutput) and ev.job == job:
                (out if ev.stream == "stdout" else err).append(ev.data)
            elif isinstance(ev, JobExited) and ev.job == job:
                return Result(ev, b"".join(out), b"".join(err), running)

    async def run(self, pod: str, argv: list[str], **kw: object) -> Result:
        job = f"job-{uuid.uuid4().hex[:8]}"
        await self.rt.bind(pod, JobBinding(job=job, argv=tuple(argv), **kw))  # type: ignore[arg-type]
        return await self.collect(job)

    async def pod(
        self, profile: RuntimeProfile = PLAIN, standby: bool = False, gpus: tuple[str, ...] = ()
    ) -> str:
        pod = f"p{uuid.uuid4().hex[:10]}"
        await self.rt.start_pod(pod, profile, gpus or ("vgpu0",), standby)
        assert await self.until(PodUp) == PodUp(pod)
        return pod


def procs_with(marker: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                cmd = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if marker.encode() in cmd and b"pytest" not in cmd:
                found.append(int(name))
    return found


# the __init__.py of a package whose every import leaves a line in the pod's workspace
IMPORT_COUNTER = (
    "import os\n"
    "with open(os.path.join(os.environ['HOME'], 'imports.log'), 'a') as f:\n"
    "    f.write(str(os.getpid()) + '\\n')\n"
)


def import_count(name: str) -> str:
    """A job's code: import ``name`` (an IMPORT_COUNTER package), print how often it has
    been imported in this pod."""
    log = "os.path.expanduser('~/imports.log')"
    return f"import {name}, os; print(len(open({log}).read().split()))"
