"""Soak: a real ``stoker up`` (loopback only) under 8 callers for N minutes; is it flat?

Each caller is a tenant with its own reuse tag (so its pod stays warm) that loops: submit a
short job (with an env value and a secret), wait for it, read its output, list its jobs, and
every tenth round submits a bad body (refused with a 4xx). The broker's RSS (VmRSS) and open
file descriptors are sampled every ``--sample-s`` seconds: the first sample after a one-minute
warm-up (at most a fifth of the run) is the start, the last one the end. The run is bounded:
callers stop at the deadline and the broker is stopped with its pods.

    .venv/bin/python benchmarks/soak.py [--minutes 10] [--callers 8] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from stoker.broker.bench import BrokerProcess

JOB = ["python", "-c", "import os; print(len(os.environ['TOKEN']), os.environ['K'])"]


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _caller(
    url: str, token: str, tag: str, until: float, counts: dict[str, int], failures: list[Any]
) -> None:
    """One caller's loop; an HTTP error (a wait that outlived its timeout included) ends it,
    counted in ``caller_errors`` and told in ``failures``, never silently."""
    try:
        _loop(url, token, tag, until, counts, failures)
    except (httpx.HTTPError, KeyError) as exc:
        counts["caller_errors"] += 1
        failures.append({"caller": tag, "error": repr(exc)[:300]})


def _loop(
    url: str, token: str, tag: str, until: float, counts: dict[str, int], failures: list[Any]
) -> None:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=90) as c:
        c.post("/v1/secrets", json={"name": "TOKEN", "value": "s" * 32}).raise_for_status()
        n = 0
        while time.monotonic() < until:
            n += 1
            body = {
                "profile": "plain",
                "argv": JOB,
                "reuse_tag": tag,
                "env": {"K": str(n)},
                "secrets": ["TOKEN"],
            }
            r = c.post("/v1/jobs", json=body, headers={"Idempotency-Key": f"{tag}-{n}"})
            r.raise_for_status()
            job = r.json()["id"]
            row = c.get(f"/v1/jobs/{job}/wait", params={"timeout_s": 60}).json()
            out = c.get(f"/v1/jobs/{job}/output", params={"follow": n % 2 == 0})
            ok = row["exit_code"] == 0 and out.status_code == 200
            counts["jobs" if ok else "failed"] += 1
            if not ok:
                failures.append({k: row[k] for k in ("id", "state", "exit_code", "failure")})
            c.get("/v1/jobs", params={"limit": 20}).raise_for_status()
            if n % 10 == 0:
                bad = c.post("/v1/jobs", content=b"{not json", headers={"content-type": "x"})
                counts["refused" if 400 <= bad.status_code < 500 else "failed"] += 1


def soak(minutes: float, callers: int, sample_s: float, work: Path) -> dict[str, Any]:
    """Run the soak; returns the samples and the start/end figures."""
    prof = [{"name": "plain", "share": 1.0, "standby_share": 0.0}]
    bp = BrokerProcess(work / "data", prof, gpu_slots=callers, keepalive_s=3600)
    samples: list[dict[str, float]] = []
    counts = {"jobs": 0, "failed": 0, "refused": 0, "caller_errors": 0}
    failures: list[Any] = []
    try:
        with httpx.Client(
            base_url=bp.url, headers={"Authorization": f"Bearer {bp.admin_token}"}
        ) as admin:
            tokens = [
                admin.post("/v1/tenants", json={"name": f"t{i}"}).json()["token"]
                for i in range(callers)
            ]
        t0 = time.monotonic()
        until = t0 + minutes * 60.0
        threads = [
            threading.Thread(target=_caller, args=(bp.url, tok, f"tag{i}", until, counts, failures))
            for i, tok in enumerate(tokens)
        ]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            samples.append(
                {
                    "t_s": time.monotonic() - t0,
                    "rss_mb": bp.rss_mb(),
                    "fds": _fds(bp.proc.pid),
                    "jobs": counts["jobs"],
                }
            )
            time.sleep(sample_s)
        for t in threads:
            t.join()
    finally:
        bp.stop()
    warmup = min(60.0, minutes * 60.0 / 5)
    start = next((s for s in samples if s["t_s"] >= warmup), samples[0])
    end = samples[-1]
    return {
        "host": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "params": {"minutes": minutes, "callers": callers, "sample_s": sample_s},
        "counts": counts,
        "failures": failures[:20],
        "jobs_per_s": counts["jobs"] / (minutes * 60.0),
        "start": start,
        "end": end,
        "rss_growth_mb": end["rss_mb"] - start["rss_mb"],
        "fds_growth": end["fds"] - start["fds"],
        "samples": samples,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--callers", type=int, default=8)
    ap.add_argument("--sample-s", type=float, default=10.0)
    ap.add_argument("--out", type=Path, default=Path("stoker-results/soak.json"))
    args = ap.parse_args()
    if not 0 < args.minutes <= 120:
        ap.error("--minutes: between 0 and 120")
    with tempfile.TemporaryDirectory(prefix="stoker-soak-") as work:
        res = soak(args.minutes, args.callers, args.sample_s, Path(work))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2))
    s, e = res["start"], res["end"]
    print(
        f"soak {args.minutes:g} min, {args.callers} callers: {res['counts']['jobs']} jobs"
        f" ({res['jobs_per_s']:.1f}/s), {res['counts']['failed']} failed,"
        f" {res['counts']['refused']} bad bodies refused,"
        f" {res['counts']['caller_errors']} callers stopped by an error"
    )
    print(f"broker RSS {s['rss_mb']:.1f} MB at {s['t_s']:.0f} s -> {e['rss_mb']:.1f} MB at end")
    print(f"broker open fds {s['fds']} -> {e['fds']}   ({args.out})")
    if res["counts"]["failed"] or res["counts"]["caller_errors"]:
        raise SystemExit(f"soak: failures: {res['failures'][:3]}")


if __name__ == "__main__":
    main()
