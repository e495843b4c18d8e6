"""The broker's data dir is private: 700 for it and the runtime's dirs, 600 for every file
the broker keeps there (the store, tokens, the secret key, the decision log).

Checked at every start: a dir or file found looser (made by an older stoker, by hand, or
by a tool with a wide umask) is tightened, and the broker logs which. Pods never need a
path under these dirs from the host: what a pod sees is bound into its sandbox by the
runtime, so 700 takes nothing from them.
"""

from __future__ import annotations

import logging
import stat
from pathlib import Path

log = logging.getLogger("stoker.broker")

DIR_MODE = 0o700
FILE_MODE = 0o600


def make_private(data_dir: Path, runtime_dir: Path) -> list[str]:
    """Create ``data_dir`` (700) if need be and tighten what is looser: ``data_dir`` and its
    files, ``runtime_dir`` and its code cache (whose archives the code store itself keeps
    600, :class:`~stoker.runtime.code.CodeStore`). Returns one line per path tightened
    (also logged)."""
    data_dir.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    changed: list[str] = []
    _tighten(data_dir, DIR_MODE, changed)
    for path in sorted(data_dir.iterdir()):
        if path.is_file() and not path.is_symlink():
            _tighten(path, FILE_MODE, changed)
    runtime_dir.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    for d in (runtime_dir, runtime_dir / "code"):
        if d.is_dir():
            _tighten(d, DIR_MODE, changed)
    for line in changed:
        log.warning("private data dir: %s", line)
    return changed


def _tighten(path: Path, mode: int, changed: list[str]) -> None:
    old = stat.S_IMODE(path.stat().st_mode)
    if old & ~mode:
        path.chmod(old & mode)
        changed.append(f"{path} was {old:o}, now {old & mode:o}")
