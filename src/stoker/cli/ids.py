"""Job ids as the CLI prints and takes them: shortened in ``ps``, resolved back by every
command that takes one (``logs``, ``cancel``, ``events --job``)."""

from __future__ import annotations

from typing import Any

SHORT_ID = 10  # "j-" and 8 hex digits: what ps prints and what the commands accept


def short_id(job_id: str) -> str:
    return job_id[:SHORT_ID]


def resolve(c: Any, job_id: str) -> str:
    """The full id of ``job_id`` (a full id, or a unique prefix of one of your jobs);
    NotFound naming ``job_id`` otherwise."""
    from stoker.client import NotFound

    try:
        return str(c.get(job_id)["id"])
    except NotFound:
        matches = [j["id"] for j in c.jobs(limit=1000) if j["id"].startswith(job_id)]
        if len(matches) != 1:
            why = "no job" if not matches else f"{len(matches)} jobs match"
            raise NotFound(f"job_id: {why} {job_id!r}", 404, "job_id") from None
        return str(matches[0])
