"""An RL reward loop against a real local broker: two trainers (tenants), each round every
trainer submits ``--jobs-per-round`` concurrent reward jobs with reuse tags
``rw-<tenant>-<i % 8>`` on a CPU-only profile of 16 slots and waits for all of them, then
pauses. Prints per round and trainer the distinct pods per tag so far, the cold share and
the round's wall time, and writes JSON with the host it ran on.

    .venv/bin/python benchmarks/rl_loop.py [--rounds 8] [--pause-s 20] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from stoker.broker.bench import BrokerProcess
from stoker.broker.bench_host import host_environment
from stoker.client import AsyncClient, Client

TAGS = 8
SLOTS = 16
REWARD = ["python", "-c", "pass"]


async def _round(c: AsyncClient, tenant: str, n: int) -> tuple[float, list[Any]]:
    t0 = time.perf_counter()
    jobs = await asyncio.gather(
        *(c.run("reward", REWARD, reuse_tag=f"rw-{tenant}-{i % TAGS}", wait_s=0) for i in range(n))
    )
    results = await asyncio.gather(*(j.result(300) for j in jobs))
    return time.perf_counter() - t0, results


async def _loop(bp: BrokerProcess, tokens: dict[str, str], args: argparse.Namespace) -> list:
    rows: list[dict[str, Any]] = []
    pods: dict[str, set[str]] = {}
    clients = {t: AsyncClient(bp.url, tok) for t, tok in tokens.items()}
    try:
        for r in range(args.rounds):
            # the trainers' rounds overlap: each starts its round as the other's runs
            done = await asyncio.gather(
                *(_round(c, t, args.jobs_per_round) for t, c in clients.items())
            )
            for tenant, (wall, results) in zip(clients, done, strict=True):
                for i, res in enumerate(results):
                    pods.setdefault(f"rw-{tenant}-{i % TAGS}", set()).update(res.pods)
                cold = sum(res.path == "cold" for res in results)
                mine = [p for tag, p in pods.items() if tag.startswith(f"rw-{tenant}-")]
                rows.append(
                    {
                        "round": r + 1,
                        "tenant": tenant,
                        "jobs": len(results),
                        "errors": sum(not x.ok for x in results),
                        "cold_share": cold / len(results),
                        "pods_per_tag_max": max(len(p) for p in mine),
                        "wall_s": wall,
                    }
                )
                print(json.dumps(rows[-1]))
            await asyncio.sleep(args.pause_s)
    finally:
        for c in clients.values():
            await c.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--pause-s", type=float, default=20.0)
    ap.add_argument("--jobs-per-round", type=int, default=64)
    ap.add_argument("--out", type=Path, default=Path("rl_loop.json"))
    args = ap.parse_args()
    host = host_environment()
    with tempfile.TemporaryDirectory(prefix="stoker-rl-", dir="/var/tmp") as tmp:
        profile = {"name": "reward", "gpus": 0, "cpus": 1.0, "memory_mb": 1024}
        bp = BrokerProcess(
            Path(tmp) / "broker",
            [profile],
            gpu_slots=0,
            keepalive_s=300.0,
            cpu_slots={"cpus": float(SLOTS), "memory_mb": 1024 * SLOTS},
        )
        try:
            with Client(bp.url, bp.admin_token) as admin:
                tokens = {t: admin.create_tenant(t) for t in ("a", "b")}
            rows = asyncio.run(_loop(bp, tokens, args))
        finally:
            bp.stop()
    host["loadavg_1m_end"] = os.getloadavg()[0]
    later = [r for r in rows if r["round"] > 1]
    summary = {
        "pods_per_tag_max": max(r["pods_per_tag_max"] for r in rows),
        "tag_concurrency": args.jobs_per_round // TAGS,
        "cold_share_after_round_1": (
            sum(r["cold_share"] * r["jobs"] for r in later) / max(1, sum(r["jobs"] for r in later))
        ),
        "errors": sum(r["errors"] for r in rows),
    }
    doc = {
        "host": host,
        "params": vars(args) | {"out": str(args.out)},
        "rounds": rows,
        "summary": summary,
    }
    args.out.write_text(json.dumps(doc, indent=2))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
