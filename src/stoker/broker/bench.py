"""``stoker demo`` and ``stoker bench local``: measured through the real API, runtime and agent.

Every latency comes from the broker's own job records (submit -> the job's process running,
as the agent reports it), never from a client-side estimate; loop times and throughput are
wall-clock seconds seen by the client.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from stoker.broker.bench_host import end_steps_ms, host_environment, outliers
from stoker.broker.config import BrokerConfig, BrokerProfile, PolicyConfig
from stoker.broker.embedded import EmbeddedBroker, free_port
from stoker.client import DEFAULT_WAIT_S, Client, StokerError
from stoker.runtime.calibrate import calibrate
from stoker.runtime.reaper import PARENT_ENV

TRIVIAL = ["python", "-c", "pass"]
SHORT = ["python", "-c", "import sys; sys.stdout.write('ok')"]


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) by linear interpolation; None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _tenant_client(url: str, admin_token: str, name: str) -> Client:
    with Client(url, admin_token) as admin:
        token = admin.create_tenant(name)
    return Client(url, token)


def _loop(
    client: Client, profile: str, n: int, tag: Callable[[int], str], argv: list[str]
) -> tuple[float, list[dict[str, Any]]]:
    """An agent loop: each job submitted as soon as the one before it finished."""
    rows = []
    t0 = time.perf_counter()
    for i in range(n):
        rows.append(client.run(profile, argv, reuse_tag=tag(i)).wait(120))
    return time.perf_counter() - t0, rows


def _client_calls(client: Client, profile: str, n: int) -> dict[float, list[float]]:
    """Client wall time (ms) of trivial calls ``run(...).result()`` into one warm pod (what
    an agent's tool call costs end to end, beside the broker-measured start): ``n`` with the
    submit waiting for the end (one round trip) and ``n`` with ``wait_s=0`` (submit,
    long-poll, output: the three calls it replaced), interleaved so both see the same load."""
    took: dict[float, list[float]] = {DEFAULT_WAIT_S: [], 0.0: []}
    for _ in range(n):
        for wait_s, out in took.items():
            t0 = time.perf_counter()
            client.run(profile, TRIVIAL, reuse_tag="warm", wait_s=wait_s).result(120)
            out.append((time.perf_counter() - t0) * 1000.0)
    return took


def _until(pred: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError("bench: condition not reached (is the standby pod starting?)")
        time.sleep(0.02)


def _settle(admin: Client, quiet_s: float = 5.0, timeout_s: float = 300.0) -> None:
    """Wait until no pod is starting and the pods have stayed as they are for ``quiet_s``
    (the broker stages standby pods a while after the first jobs)."""
    deadline = time.monotonic() + timeout_s
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        now = sorted((p["id"], p["state"]) for p in admin.pods())
        if now != last:
            last, since = now, time.monotonic()
        elif all(s != "starting" for _, s in now) and time.monotonic() - since >= quiet_s:
            return
        time.sleep(0.1)
    raise TimeoutError("bench: the pods did not settle (a pod keeps starting?)")


def _starts(rows: list[dict[str, Any]], path: str | None = None) -> list[float]:
    return [
        r["start_latency_ms"]
        for r in rows
        if r["start_latency_ms"] is not None and (path is None or r["path"] == path)
    ]


# ----------------------------------------------------------------------------- demo


def run_demo(
    n_jobs: int = 12, preload: tuple[str, ...] = (), work_dir: Path | None = None
) -> dict[str, Any]:
    """An agent loop of short jobs, three ways, each on its own embedded broker; pods of
    the profile import ``preload`` once (``("torch",)`` makes a fresh pod costly, as on a
    real GPU host). The brokers' data dirs go under ``work_dir``, or a temporary directory
    removed at the end."""
    if work_dir is None:
        with tempfile.TemporaryDirectory(prefix="stoker-demo-") as tmp:
            return run_demo(n_jobs, preload, Path(tmp))
    base = Path(work_dir)
    modes = [
        ("fresh pod per job", 0.0, False, lambda i: f"job-{i}"),
        ("fresh reuse tag per job", 60.0, False, lambda i: f"job-{i}"),
        ("warm reuse + standby", 60.0, True, lambda i: "agent-loop"),
    ]
    out: dict[str, Any] = {"jobs": n_jobs, "preload": list(preload), "modes": {}}
    for name, keepalive, standby, tag in modes:
        cfg = BrokerConfig(
            data_dir=base / name.replace(" ", "-").replace("+", "and"),
            profiles=[BrokerProfile.simple("plain", standby=standby, preload=preload)],
            gpu_slots=2,
            policies=PolicyConfig(keepalive_s=keepalive),
        )
        with EmbeddedBroker(cfg) as eb, _tenant_client(eb.url, eb.admin_token, "demo") as c:
            took, rows = _loop(c, "plain", n_jobs, tag, SHORT)
        starts = _starts(rows)
        out["modes"][name] = {
            "loop_s": took,
            "start_ms_p50": percentile(starts, 0.5),
            "start_ms_p90": percentile(starts, 0.9),
            "paths": {
                p: sum(1 for r in rows if r["path"] == p) for p in ("warm", "standby", "cold")
            },
        }
    names = [m[0] for m in modes]
    ref = out["modes"][names[0]]["loop_s"]
    for name in names:
        out["modes"][name]["speedup"] = ref / out["modes"][name]["loop_s"]
    return out


# ----------------------------------------------------------------------------- bench


class BrokerProcess:
    """``stoker up`` in a child process (so its memory is the broker's alone)."""

    def __init__(
        self,
        data_dir: Path,
        profiles: list[dict[str, Any]],
        gpu_slots: int,
        keepalive_s: float = 300.0,
        port: int = 0,
        settings: dict[str, str] | None = None,
        args: tuple[str, ...] = (),
        cpu_slots: dict[str, float] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        data_dir.mkdir(parents=True, exist_ok=True)
        lines = [
            f'data_dir = "{data_dir}"',
            f"gpu_slots = {gpu_slots}",
            *(f"{k} = {json.dumps(v)}" for k, v in (settings or {}).items()),
            "[policies]",
            f"keepalive_s = {keepalive_s}",
        ]
        if cpu_slots:
            lines.append("[cpu_slots]")
            lines += [f"{k} = {json.dumps(v)}" for k, v in cpu_slots.items()]
        for p in profiles:
            lines.append(f"[profiles.{p['name']}]")
            # a CPU-only profile (gpus = 0) has no GPU share and no standby
            if p.get("gpus", 1):
                lines.append(f"share = {p.get('share', 0.9)}")
                lines.append(f"standby_share = {p.get('standby_share', 0.1)}")
            lines.append(f"preload = {json.dumps(p.get('preload', []))}")
            rest = {k: v for k, v in p.items() if k not in ("name", "share", "standby_share")}
            lines += [f"{k} = {json.dumps(v)}" for k, v in rest.items() if k != "preload"]
        self.config = data_dir / "broker.toml"
        self.config.write_text("\n".join(lines) + "\n")
        cmd = [
            sys.executable,
            "-m",
            "stoker.cli.main",
            "up",
            "--config",
            str(self.config),
            "--port",
            str(self.port),
            *args,
        ]
        # the child dies with this process, however it ends (its SIGTERM stops its pods)
        env = {**os.environ, PARENT_ENV: str(os.getpid())}
        with open(data_dir / "broker.log", "ab") as log:  # the child keeps its own copy
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, env=env)
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{self.url}/v1/ready", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"broker did not start: {(data_dir / 'broker.log').read_text()[-2000:]}"
                )
            time.sleep(0.05)
        keys = Path((settings or {}).get("keys_dir", data_dir))
        self.admin_token = (keys / "admin.token").read_text().strip()

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
        raise RuntimeError("no VmRSS")

    def stop(self) -> None:
        """SIGTERM: the broker stops its pods and exits (SIGKILL if it takes over a minute)."""
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL, as a crash: the pods keep running for the next broker (or leader)."""
        self.proc.kill()
        self.proc.wait()


THROUGHPUT_PODS = 4  # warm pods the callers share (caller i runs in pod i % 4)
THROUGHPUT_CALLERS = (4, 16)


def _bench_profile(
    base: Path,
    name: str,
    preload: list[str],
    warm_n: int,
    cold_n: int,
    handover_n: int,
    throughput_s: float,
    phase: Callable[[str], None],
    deps_n: int = 10,
    callers: tuple[int, ...] = THROUGHPUT_CALLERS,
) -> dict[str, Any]:
    res: dict[str, Any] = {"preload": preload}
    phase(f"{name}: warm and cold starts")
    prof = {"name": name, "preload": preload}
    # warm and cold: a free GPU for every cold job and no standby, so each fresh caller gets
    # a new sandbox (not a recycled pod, not a standby); keep-alive outlasts the run
    cold_prof = {**prof, "share": 1.0, "standby_share": 0.0}
    bp = BrokerProcess(base / f"{name}-latency", [cold_prof], gpu_slots=cold_n + 1)
    try:
        with _tenant_client(bp.url, bp.admin_token, "bench") as c:
            _, cold = _loop(c, name, cold_n, lambda i: f"cold-{uuid.uuid4().hex}", TRIVIAL)
            _, warm = _loop(c, name, warm_n + 1, lambda i: "warm", TRIVIAL)
            calls = _client_calls(c, name, warm_n)
        one, three = calls[DEFAULT_WAIT_S], calls[0.0]
        res["idle_rss_mb"] = bp.rss_mb()
        res["client"] = {
            "n": len(one),
            "call_ms_p50": percentile(one, 0.5),
            "call_ms_p99": percentile(one, 0.99),
            "call_ms_p50_three_round_trips": percentile(three, 0.5),
        }
    finally:
        bp.stop()
    warm_ms = _starts(warm[1:], "warm")  # the first of the loop starts its pod
    cold_ms = _starts(cold, "cold")
    res["warm"] = {
        "n": len(warm_ms),
        "start_ms_p50": percentile(warm_ms, 0.5),
        "start_ms_p99": percentile(warm_ms, 0.99),
    }
    res["warm"]["end_steps_ms"] = steps = end_steps_ms(warm[1:])
    res["flags"] = [
        f"warm job step {s}: {steps[s]:.1f} ms, far above the others" for s in outliers(steps)
    ]
    res["cold"] = {"n": len(cold_ms), "start_ms_p50": percentile(cold_ms, 0.5)}
    if res["warm"]["start_ms_p50"] and res["cold"]["start_ms_p50"]:
        res["cold_over_warm"] = res["cold"]["start_ms_p50"] / res["warm"]["start_ms_p50"]
    # standby and handover: one GPU, a fresh caller per job, so each job takes the GPU from
    # the one before it through a promoted standby pod
    phase(f"{name}: standby and handover")
    bp = BrokerProcess(base / f"{name}-handover", [prof], gpu_slots=1)
    try:
        with (
            Client(bp.url, bp.admin_token) as admin,
            _tenant_client(bp.url, bp.admin_token, "bench") as c,
        ):
            # standby start: the loop pauses until the next standby pod has staged
            rows = []
            for i in range(handover_n + 1):
                rows.append(c.run(name, TRIVIAL, reuse_tag=f"caller-{i}").wait(120))
                _until(lambda: any(p["state"] == "standby" for p in admin.pods()), 60)
            # handover: the next caller's job waits while the one before it still runs
            # each job holds its GPU longer than a new standby takes to stage beside it
            hold_s = max(0.5, 2.0 * (res["cold"]["start_ms_p50"] or 0.0) / 1000.0)
            hold = ["python", "-c", f"import time; time.sleep({hold_s:.2f})"]
            res["handover_job_s"] = hold_s
            hand = []
            prev = c.run(name, hold, reuse_tag="hand-0", wait_s=0)
            for i in range(1, handover_n + 1):
                _until(lambda: any(p["state"] == "standby" for p in admin.pods()), 60)
                nxt = c.run(name, hold, reuse_tag=f"hand-{i}", wait_s=0)
                hand.append(prev.wait(120))
                prev = nxt
            hand.append(prev.wait(120))
    finally:
        bp.stop()
    standby_ms = _starts(rows, "standby")
    handovers = [
        (b["started"] - a["finished"]) * 1000.0
        for a, b in itertools.pairwise(hand)
        if b["path"] == "standby"
        and b["started"]
        and a["finished"]
        and b["started"] > a["finished"]
    ]
    res["standby"] = {"n": len(standby_ms), "start_ms_p50": percentile(standby_ms, 0.5)}
    res["handover_ms_p50"] = percentile(handovers, 0.5)
    res["handover"] = {
        "n": len(handovers),
        "paths": {p: sum(1 for r in hand if r["path"] == p) for p in ("warm", "standby", "cold")},
    }
    phase(f"{name}: a job's extra dependency, imported once per warm pod")
    res["deps_layer"] = _deps_layer(base, name, preload, deps_n)
    # throughput: trivial jobs into warm pods, from several callers at once
    phase(f"{name}: throughput")
    bp = BrokerProcess(base / f"{name}-throughput", [prof], gpu_slots=THROUGHPUT_PODS)
    try:
        with Client(bp.url, bp.admin_token) as admin:
            tokens = [admin.create_tenant(f"t{i}") for i in range(THROUGHPUT_PODS)]
        res["throughput"] = {
            str(n): _throughput(bp, tokens, name, n, throughput_s) for n in callers
        }
    finally:
        bp.stop()
    for n, t in res["throughput"].items():
        cpu = {role: t[f"{role}_cpu_ms_per_job"] for role in CPU_ROLES}
        res["flags"] += [
            f"{n} callers: {role} CPU {cpu[role]:.1f} ms a job, far above the others"
            for role in outliers(cpu)
        ]
    return res


# a stand-in for a caller's extra dependency that takes a while to import: standard modules
# the zygote has not imported, and a module body of many functions (compiled afresh at each
# import: uv installs no bytecode)
_DEP_MODULES = ("decimal", "difflib", "email.mime.multipart", "http.server", "pydoc", "unittest")
_DEP_BODY = "".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(3000))


def pure_wheel(where: Path, name: str, init: str) -> Path:
    """A pure-Python wheel of package ``name`` whose ``__init__.py`` is ``init``, built by
    hand (no build backend, no network) so that ``--find-links`` serves it offline."""
    dist = f"{name}-0.1.dist-info"
    files = {
        f"{name}/__init__.py": init,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: stoker\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    path = where / f"{name}-0.1-py3-none-any.whl"
    where.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        for n, text in files.items():
            zf.writestr(n, text)
        zf.writestr(f"{dist}/RECORD", "".join(f"{n},,\n" for n in files) + f"{dist}/RECORD,,\n")
    return path


def _deps_layer(base: Path, name: str, preload: list[str], n: int) -> dict[str, Any]:
    """What the deps layer saves: one caller's calls of a job with an extra dependency into
    its warm pod. The first call installs the dependency (uv, offline) and imports it in
    the job, as a pod without the layer does on every call; the pod then keeps it imported
    (its deps layer) and later calls fork with it done. Each job times its own import."""
    dep = "stokerbenchdep"
    wheels = base / f"{name}-wheels"
    pure_wheel(wheels, dep, "".join(f"import {m}\n" for m in _DEP_MODULES) + _DEP_BODY)
    took = "print((time.perf_counter() - t) * 1e3)"
    argv = ["python", "-c", f"import time; t = time.perf_counter(); import {dep}; {took}"]
    settings = {"find_links": [str(wheels)], "no_index": True}
    prof = {"name": name, "preload": preload, "share": 1.0, "standby_share": 0.0}
    bp = BrokerProcess(base / f"{name}-deps", [prof], gpu_slots=1, settings=settings)
    calls: list[tuple[float, float]] = []  # (call ms, import ms in the job)
    try:
        with _tenant_client(bp.url, bp.admin_token, "bench") as c:
            c.run(name, TRIVIAL, reuse_tag="deps").result(120)  # the warm pod, no deps yet
            for _ in range(n + 1):
                t0 = time.perf_counter()
                r = c.run(name, argv, reuse_tag="deps", deps=[dep]).result(300)
                if not r.ok:
                    raise RuntimeError(f"bench: the deps job failed: {r.stderr.decode()[-500:]}")
                calls.append(((time.perf_counter() - t0) * 1e3, float(r.stdout.decode())))
    finally:
        bp.stop()
    later = calls[1:]
    return {
        "n": len(later),
        "modules": list(_DEP_MODULES),
        "first_call_ms": calls[0][0],  # with the install
        "first_import_ms": calls[0][1],  # what a pod without the layer pays per call
        "later_call_ms_p50": percentile([c for c, _ in later], 0.5),
        "later_import_ms_p50": percentile([i for _, i in later], 0.5),
    }


def _stat(pid: int) -> list[str]:
    """``/proc/PID/stat``'s fields after the command name (field 3 of proc(5) first)."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


def cpu_seconds(pid: int, children: bool = False) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far; with ``children``,
    plus what its children that it has reaped used."""
    fields = _stat(pid)
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def pod_cpu_seconds(broker_pid: int) -> dict[tuple[int, str], float]:
    """CPU seconds each process of the pods of broker ``broker_pid`` (its descendants) has
    used so far, keyed by (pid, role): ``agent`` (a pod's agent process itself) or ``jobs``
    (everything else: the sandbox's init, the zygote with the spares it forked and reaped,
    each job's own process among them). :func:`pod_cpu_used` turns two readings into what
    ran in between."""
    parent: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                parent[int(name)] = int(_stat(int(name))[1])
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
    kids: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        kids.setdefault(ppid, []).append(pid)
    out: dict[tuple[int, str], float] = {}
    todo = [(k, False) for k in kids.get(broker_pid, [])]
    while todo:
        pid, under_agent = todo.pop()
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            agent = not under_agent and argv[1:3] == [b"-m", b"stoker.agent"]
            # a live process's own CPU and its reaped children's: never counted twice,
            # since a live process is nobody's reaped child
            total = cpu_seconds(pid, children=True)
            own = cpu_seconds(pid) if agent else total
        except (OSError, IndexError, ValueError):
            continue
        if agent:
            out[(pid, "agent")] = own
        out[(pid, "jobs")] = total - own if agent else own  # an agent's reaped helpers
        todo += [(k, under_agent or agent) for k in kids.get(pid, [])]
    return out


def pod_cpu_used(
    before: dict[tuple[int, str], float], after: dict[tuple[int, str], float]
) -> dict[str, float]:
    """CPU seconds per role between two :func:`pod_cpu_seconds` readings: a process alive
    at both counts its difference, one started in between all it used; one that ended in
    between (a pod stopped) is left out, its share uncounted."""
    used = {"agent": 0.0, "jobs": 0.0}
    for (pid, role), cpu in after.items():
        used[role] += cpu - before.get((pid, role), 0.0)
    return used


def _warm_each(clients: list[Client], profile: str, rounds: int = 5) -> None:
    """One warm pod per client (client i's tag ``w{i}``), each still its own: rounds of one
    job per client until a round runs every job in the pod of the round before.

    One round is not enough: a later client's first job may promote a standby pod staged
    beside an earlier client's idle pod, which that promotion stops; the earlier client's
    next job (in the measured window) then starts a pod of its own, and the standby pods
    staged after it import the profile's modules inside the window."""
    last: list[tuple[str, ...]] | None = None
    for _ in range(rounds):
        now = [
            c.run(profile, TRIVIAL, reuse_tag=f"w{i}").result(120).pods
            for i, c in enumerate(clients)
        ]
        if now == last:
            return
        last = now


def _throughput(
    bp: BrokerProcess, tokens: list[str], profile: str, callers: int, seconds: float
) -> dict[str, Any]:
    """Trivial jobs for ``seconds`` from ``callers`` threads, each a loop of one-round-trip
    calls (``run(...).result()``) into its tenant's warm pod (one tenant, and pod, per
    token); with more callers than pods several share a pod (a job waits in the queue for
    it). Jobs per second end to end as the callers saw them, with the client call time and
    the calls that failed or did not exit 0, and the CPU the broker process and the callers
    spent per job (what a shared host's load does not change)."""
    pods = min(callers, len(tokens))
    clients = [Client(bp.url, tokens[i % pods]) for i in range(callers)]
    try:
        _warm_each(clients[:pods], profile)
        # and let the standby pods the broker stages beside them finish starting (a torch
        # pod's import takes seconds of CPU): the window measures warm jobs, nothing else
        with Client(bp.url, bp.admin_token) as admin:
            _settle(admin)

        def worker(i: int) -> tuple[list[float], int]:
            took, errors = [], 0
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                t0 = time.perf_counter()
                try:
                    r = clients[i].run(profile, TRIVIAL, reuse_tag=f"w{i % pods}")
                    ok = r.result(60).exit_code == 0
                except StokerError:
                    ok = False
                took.append((time.perf_counter() - t0) * 1000.0)
                errors += not ok
            return took, errors

        pods0, t0 = pod_cpu_seconds(bp.proc.pid), time.perf_counter()
        cpu0, own0 = cpu_seconds(bp.proc.pid), time.process_time()
        with ThreadPoolExecutor(callers) as ex:
            done = list(ex.map(worker, range(callers)))
        wall = time.perf_counter() - t0
        cpu, own = cpu_seconds(bp.proc.pid) - cpu0, time.process_time() - own0
        pod_cpu = pod_cpu_used(pods0, pod_cpu_seconds(bp.proc.pid))
    finally:
        for c in clients:
            c.close()
    calls = [ms for took, _ in done for ms in took]
    return {
        "callers": callers,
        "pods": pods,
        "jobs": len(calls),
        "errors": sum(e for _, e in done),
        "seconds": wall,
        "jobs_per_s": len(calls) / wall,
        "call_ms_p50": percentile(calls, 0.5),
        "call_ms_p99": percentile(calls, 0.99),
        "broker_cpu_ms_per_job": cpu * 1000.0 / max(len(calls), 1),
        "client_cpu_ms_per_job": own * 1000.0 / max(len(calls), 1),
        "agent_cpu_ms_per_job": pod_cpu["agent"] * 1000.0 / max(len(calls), 1),
        # the pod's other processes: its zygote, the spares it forked, the jobs themselves
        "jobs_cpu_ms_per_job": pod_cpu["jobs"] * 1000.0 / max(len(calls), 1),
    }


#: who spends CPU on a warm job (``<role>_cpu_ms_per_job`` in each throughput result)
CPU_ROLES = ("broker", "client", "agent", "jobs")
BENCH_PHASES = 4  # warm and cold, standby and handover, deps layer, throughput


def _quiet(_: str) -> None:
    """No progress display."""


def run_bench(
    out_dir: Path,
    warm_n: int = 100,
    cold_n: int = 5,
    handover_n: int = 10,
    throughput_s: float = 10.0,
    torch: bool = True,
    work_dir: Path | None = None,
    phase: Callable[[str], None] | None = None,
    callers: tuple[int, ...] = THROUGHPUT_CALLERS,
) -> dict[str, Any]:
    """Measure both profiles and write ``out_dir/results.json``, then the step durations
    the simulator draws from to ``out_dir/calibration.json``; the brokers' data dirs go
    under ``work_dir`` (a temporary directory removed at the end by default). ``phase``
    hears the name of each phase as it begins (BENCH_PHASES of them per profile, then the
    calibration), for a progress display. ``callers``: the throughput runs' caller counts,
    one run each (they share THROUGHPUT_PODS warm pods)."""
    if not callers or min(callers) < 1:
        raise ValueError(f"callers: at least 1 caller a run, and a run (got {callers})")
    if work_dir is None:
        with tempfile.TemporaryDirectory(prefix="stoker-bench-") as tmp:
            return run_bench(
                out_dir,
                warm_n,
                cold_n,
                handover_n,
                throughput_s,
                torch,
                Path(tmp),
                phase,
                callers,
            )
    out_dir.mkdir(parents=True, exist_ok=True)
    base = Path(work_dir)
    profiles = {"plain": []}
    if torch:
        profiles["torch-cpu"] = ["torch"]
    results: dict[str, Any] = {
        "host": host_environment(),
        "params": {
            "warm_n": warm_n,
            "cold_n": cold_n,
            "handover_n": handover_n,
            "throughput_s": throughput_s,
            "callers": list(callers),
        },
        "goals": {
            "warm.start_ms_p50": 5,
            "warm.start_ms_p99": 20,
            "client.call_ms_p50": 15,
            "standby.start_ms_p50": 50,
            "cold_over_warm(torch)": 50,
            "handover_ms_p50": 100,
            "throughput.<callers>.jobs_per_s": 200,
            "throughput.<callers>.jobs_per_s(torch)": 150,
            "throughput.<callers>.errors": 0,
            "idle_rss_mb": 150,
        },
        "profiles": {},
    }
    for name, preload in profiles.items():
        results["profiles"][name] = _bench_profile(
            base,
            name,
            preload,
            warm_n,
            cold_n,
            handover_n,
            throughput_s,
            phase or _quiet,
            callers=callers,
        )
        results["host"]["loadavg_1m_end"] = os.getloadavg()[0]
        (out_dir / "results.json").write_text(json.dumps(results, indent=2))
    # the simulator's step durations on this host (stoker sim firepool --calibration)
    (phase or _quiet)("calibration: bind, rebind, recycle, promote, stop")
    calibrate(out_dir / "calibration.json", base / "calibration", repeats=max(3, 2 * cold_n))
    return results
