"""Binding a job into a pod: its entry point, its code, its environment and topology.

Entry points (argv) the agent knows how to run from the preloaded zygote (by fork, so
imports stay warm and each job starts from the zygote's clean state):

- ``["python", "-m", "pkg.mod", *args]``: run a module as ``__main__``;
- ``["python", "script.py", *args]``: run a script file as ``__main__``;
- ``["python", "-c", "code", *args]``: run a code string;
- ``["pkg.mod:func", *args]``: import ``pkg.mod`` and call ``func()`` with ``sys.argv`` set to
  argv; an int return value is the exit code (None: 0).

``python`` may also be ``python3``. Any other argv runs as a plain process (execvp on PATH).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from stoker.api.envnames import env_name_error

if TYPE_CHECKING:  # imported where an archive is read: a pod's zygote (and each fork of it)
    # would otherwise hold tarfile, shutil and the three compression modules shutil loads
    import tarfile

_CALL = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_PYTHONS = ("python", "python3")

CODE_MARKER = ".stoker-code-digest"


@dataclass(frozen=True, slots=True)
class Entry:
    """How to run a job: ``kind`` is module, script, code, call or exec."""

    kind: str
    target: str  # module name, script path, code text, "mod:func", or the program
    argv: tuple[str, ...]  # sys.argv for the job (exec: the full argv)

    @property
    def in_zygote(self) -> bool:
        return self.kind != "exec"


def classify(argv: tuple[str, ...] | list[str]) -> Entry:
    """The entry point of ``argv`` (ValueError if it is empty)."""
    argv = tuple(argv)
    if not argv or not all(isinstance(a, str) for a in argv) or not argv[0]:
        raise ValueError("argv: must be a non-empty list of strings")
    head = argv[0]
    if head in _PYTHONS and len(argv) >= 2:
        opt = argv[1]
        if opt == "-m" and len(argv) >= 3:
            return Entry("module", argv[2], (argv[2], *argv[3:]))
        if opt == "-c" and len(argv) >= 3:
            return Entry("code", argv[2], ("-c", *argv[3:]))
        if not opt.startswith("-"):
            return Entry("script", opt, argv[1:])
    if _CALL.match(head):
        return Entry("call", head, argv)
    return Entry("exec", head, argv)


def topology_env(rank: int, world_size: int, master_addr: str, master_port: int) -> dict[str, str]:
    """The variables torch.distributed's env:// init reads (one replica per pod)."""
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
    }


def check_env(env: dict[str, str]) -> None:
    """A job's own env: string keys and values, none of the reserved names."""
    for key, value in env.items():
        # the value is never in the message: it may be a secret, and messages get logged
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(f"env: bad entry {key!r}")
        if (why := env_name_error(key)) is not None:
            raise ValueError(f"env: {why}")


#: what one code archive may unpack to (a gzip bomb is refused before it fills a disk)
MAX_UNPACKED_BYTES = 256 * 1024 * 1024
MAX_MEMBERS = 20_000


class ArchiveTooLarge(ValueError):
    """A code archive holds more members, or unpacks to more bytes, than allowed."""


def check_archive(
    tar: tarfile.TarFile, max_bytes: int = MAX_UNPACKED_BYTES, max_members: int = MAX_MEMBERS
) -> list[tarfile.TarInfo]:
    """Read ``tar``'s member headers, refusing it as soon as it is over either cap (so a
    bomb is never read to its end); its members."""
    members: list[tarfile.TarInfo] = []
    total = 0
    for member in tar:
        members.append(member)
        total += member.size
        if len(members) > max_members:
            raise ArchiveTooLarge(f"code: more than {max_members} members")
        if total > max_bytes:
            raise ArchiveTooLarge(f"code: unpacks to more than {max_bytes} bytes")
    return members


def unpack_code(archive: Path, digest: str, workspace: Path) -> bool:
    """Unpack ``archive`` into the workspace unless this digest is already there.

    Returns True if it unpacked. Members are filtered as data (no absolute paths, no links
    out of the workspace, no device files or fifos: ``tarfile.FilterError``), and the archive
    is capped in size and members (:class:`ArchiveTooLarge`), so an archive can neither
    write outside the workspace nor fill it.
    """
    marker = workspace / CODE_MARKER
    if marker.exists() and marker.read_text() == digest:
        return False
    import tarfile  # once per pod and archive (see the TYPE_CHECKING import)

    with tarfile.open(archive) as tar:
        members = check_archive(tar)
        tar.extractall(workspace, members=members, filter="data")
    marker.write_text(digest)
    return True
