"""How many pods a throughput window starts or promotes: ``stoker bench local``'s throughput
set-up (4 tenants, one warm pod each, settled), then ``--calls`` trivial calls from each of
``--callers`` callers sharing those pods by reuse tag. Prints the start paths the jobs took
(warm, standby, cold), how many pods they ran in and how many pods are new since the
window began, as one JSON line. With more callers than pods a queued job's own pod is busy,
and the core may promote a standby or start a pod for it: in the torch-cpu profile each is
a torch import inside the window (docs/evaluation/firepool.md).

    .venv/bin/python benchmarks/pod_churn.py [--callers 16] [--calls 40]
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from stoker.broker.bench import THROUGHPUT_PODS, TRIVIAL, BrokerProcess, _settle, _warm_each
from stoker.client import Client


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--callers", type=int, default=16)
    ap.add_argument("--calls", type=int, default=40)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="stoker-churn-"))
    bp = BrokerProcess(base / "broker", [{"name": "plain", "preload": []}], THROUGHPUT_PODS)
    try:
        with Client(bp.url, bp.admin_token) as admin:
            tokens = [admin.create_tenant(f"t{i}") for i in range(THROUGHPUT_PODS)]
            clients = [Client(bp.url, tokens[i % THROUGHPUT_PODS]) for i in range(args.callers)]
            _warm_each(clients[:THROUGHPUT_PODS], "plain")
            _settle(admin)
            before = {p["id"] for p in admin.pods()}

            def caller(i: int) -> list[tuple[str, tuple[str, ...]]]:
                tag = f"w{i % THROUGHPUT_PODS}"
                return [
                    (r.path, tuple(r.pods))
                    for r in (
                        clients[i].run("plain", TRIVIAL, reuse_tag=tag).result(60)
                        for _ in range(args.calls)
                    )
                ]

            with ThreadPoolExecutor(args.callers) as ex:
                rows = [row for rows in ex.map(caller, range(args.callers)) for row in rows]
            new = {p["id"] for p in admin.pods()} - before
            for c in clients:
                c.close()
    finally:
        bp.stop()
        shutil.rmtree(base, ignore_errors=True)
    paths = collections.Counter(path for path, _ in rows)
    print(
        json.dumps(
            {
                "callers": args.callers,
                "jobs": len(rows),
                "paths": dict(paths),
                "pods_run_in": len({pods for _, pods in rows}),
                "new_pods": len(new),
            }
        )
    )


if __name__ == "__main__":
    main()
