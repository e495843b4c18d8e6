"""Removing an ended job's checkpoints from a checkpoint volume (Kubernetes).

``python -m stoker.agent.checkpoint drop ROOT JOB`` runs in a short-lived Pod the broker
creates when a job ends for good (:func:`stoker.runtime.kubernetes.pods.drop_pods`): ROOT is
this install's directory of the class's volume, JOB the job's directory there. What the job
left is the job's own to shape, links included: it is removed without following any link
(a link to another job's directory, or to anything else, goes as a link). Standard library
only: it runs from the stoker image with nothing else imported.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import sys

_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,100}$")


def drop(root: str, key: str) -> bool:
    """Remove ``root``/``key`` (a job's directory, or whatever sits in its place) without
    following links; False when there was nothing to remove. ``key`` is one plain name
    (:func:`stoker.runtime.kubernetes.pods.checkpoint_key`), never a path."""
    if not _KEY.match(key):
        raise ValueError(f"job key: one plain name, not {key!r}")
    # relative to an fd of ``root``: nothing below it is resolved by path from outside
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            st = os.lstat(key, dir_fd=fd)
        except FileNotFoundError:
            return False
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(key, dir_fd=fd)  # fd-based: it never follows a link (Linux)
        else:
            os.unlink(key, dir_fd=fd)  # a link or a file in the job's place: only it goes
    finally:
        os.close(fd)
    return True


def main(argv: list[str] | None = None) -> int:
    """``drop ROOT JOB``: 0 when removed or absent, 2 on a bad call, 1 on an error."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3 or args[0] != "drop":
        print("usage: python -m stoker.agent.checkpoint drop ROOT JOB", file=sys.stderr)
        return 2
    try:
        gone = drop(args[1], args[2])
    except (OSError, ValueError) as exc:
        print(f"checkpoint drop: {exc}", file=sys.stderr)
        return 1
    print(f"checkpoint drop: {args[2]}: {'removed' if gone else 'none kept'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
