"""The per-host code cache: archives stored once, named by their sha256 digest."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import tarfile
import tempfile
from pathlib import Path

from stoker.agent.binding import ArchiveTooLarge, check_archive

_DIGEST = re.compile(r"^[0-9a-f]{64}$")


class InvalidCode(ValueError):
    """An uploaded code archive is not a readable tar archive, or is over the caps of
    :func:`stoker.agent.binding.check_archive` (size unpacked, member count)."""


class CodeNotFound(KeyError):
    """No archive with this digest was uploaded to this host."""


class CodeStore:
    """Content-addressed store of code archives (tar, any compression tarfile reads)."""

    def __init__(self, root: Path, owner: tuple[int, int] | None = None) -> None:
        """``owner``: the (uid, gid) a job runs as, when it is not this process's: the
        archives are theirs to read (a job unpacks its archive, bound into its pod). The
        dir is 700 and each archive 600: no other local user reads a tenant's code."""
        self.root = Path(root)
        self.owner = owner
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o700)
        for path in self.root.iterdir():  # archives an older stoker stored 644
            if _DIGEST.match(path.name):
                self._private(path)

    def _private(self, path: Path | str) -> None:
        os.chmod(path, 0o600)
        if self.owner is not None:
            os.chown(path, *self.owner)

    def put(self, data: bytes) -> str:
        """Store ``data`` (once) and return its digest."""
        try:
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                check_archive(tar)
        except ArchiveTooLarge as exc:
            raise InvalidCode(str(exc)) from exc
        except (tarfile.TarError, EOFError) as exc:
            raise InvalidCode(f"code: not a tar archive ({exc})") from exc
        digest = hashlib.sha256(data).hexdigest()
        path = self.root / digest
        if not path.exists():
            # a name of its own per put: the broker's threads may store one digest at once
            fd, tmp = tempfile.mkstemp(prefix=f".{digest}.", suffix=".tmp", dir=self.root)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                self._private(tmp)
                os.replace(tmp, path)  # atomic: the digest's name holds the whole archive
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        return digest

    def remove(self, digest: str) -> None:
        """Remove archive ``digest`` (a pod it is bound into keeps its own link)."""
        if _DIGEST.match(digest):
            with contextlib.suppress(FileNotFoundError):
                (self.root / digest).unlink()

    def path(self, digest: str) -> Path:
        """Where the archive ``digest`` lies; CodeNotFound if it was never uploaded."""
        if not _DIGEST.match(digest):
            raise CodeNotFound(f"code_digest: not a sha256 hex digest: {digest!r}")
        path = self.root / digest
        if not path.exists():
            raise CodeNotFound(f"code_digest: no code uploaded with digest {digest}")
        return path
