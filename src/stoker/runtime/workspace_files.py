"""Files of a pod's workspace, read and written from the host side without trusting it.

The workspace belongs to the pod's jobs, so anything in it may be a trap: a link to a host
file, a directory swapped for a link between two steps, a fifo that blocks a reader. Every
path is therefore walked one component at a time from a descriptor of the workspace, each
step opened with ``O_NOFOLLOW`` relative to the one before (a link anywhere is refused,
never followed, and no swap can redirect a step already taken), and only regular files are
read or replaced.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import PurePosixPath

#: how much of a file one read or write step moves
CHUNK = 256 * 1024


class FileTooLarge(ValueError):
    """A file over the broker's ``max_file_bytes``; the message names the cap."""


class WorkspacePathError(ValueError):
    """A path that cannot name a file in the workspace (absolute, ``..``, empty), or one
    that runs through a link or a non-directory."""


def parts(path: str) -> tuple[str, ...]:
    """``path``'s components, relative to the workspace; WorkspacePathError if it would
    leave it or names the workspace itself."""
    p = PurePosixPath(path)
    if p.is_absolute() or "\0" in path:
        raise WorkspacePathError(f"path: {path!r} must be relative to the workspace")
    names = tuple(n for n in p.parts if n != ".")
    if not names or ".." in names:
        raise WorkspacePathError(f"path: {path!r} must name a file inside the workspace")
    return names


def _walk(root: str, names: tuple[str, ...], make: tuple[int, int] | None) -> int:
    """A descriptor of the directory that holds ``names[-1]``; missing directories are made
    (owned by ``make``'s uid and gid) when ``make`` is given."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for name in names[:-1]:
            if make is not None:
                try:
                    os.mkdir(name, 0o755, dir_fd=fd)
                    os.chown(name, *make, dir_fd=fd, follow_symlinks=False)
                except FileExistsError:
                    pass
            try:
                nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                raise
            except OSError as exc:  # ELOOP, ENOTDIR: a link or a file on the way
                raise WorkspacePathError(f"path: {name!r} is a link or not a directory") from exc
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_read(root: str, path: str) -> tuple[int, int]:
    """An open descriptor of the regular file ``path`` under ``root``, and its size.
    FileNotFoundError when there is none; WorkspacePathError for a link, a directory, a
    fifo or a device."""
    names = parts(path)
    dfd = _walk(root, names, None)
    try:
        try:
            fd = os.open(names[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise WorkspacePathError(f"path: {path!r} is a link or cannot be read") from exc
    finally:
        os.close(dfd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise WorkspacePathError(f"path: {path!r} is not a regular file")
    return fd, st.st_size


def open_write(root: str, path: str, owner: tuple[int, int] | None) -> tuple[int, int, str]:
    """A descriptor of a new, private temporary file beside ``path`` (parents made), the
    directory's descriptor and the temporary name: :func:`commit` puts it in place, so a
    reader never sees half a file and a failed upload leaves the old one."""
    names = parts(path)
    dfd = _walk(root, names, owner)
    tmp = f".{names[-1]}.stoker-upload-{secrets.token_hex(6)}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dfd)
    except BaseException:
        os.close(dfd)
        raise
    if owner is not None:
        os.fchown(fd, *owner)
    return fd, dfd, tmp


def commit(dfd: int, tmp: str, path: str) -> None:
    """Put the uploaded ``tmp`` (in the directory ``dfd``) in place of ``path``'s file (a
    link there is replaced, not followed; a directory there is an error)."""
    name = parts(path)[-1]
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
    os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)


def abort(dfd: int, tmp: str) -> None:
    """Remove a failed upload's temporary file."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp, dir_fd=dfd)


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` (os.write may take less than it is given)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
