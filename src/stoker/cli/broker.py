"""``stoker up | run | ps | pods | pools | demo | bench local``: the live broker, from
the command line.

Data commands print rich tables, or JSON with ``--json``. Errors are one line on stderr
and a nonzero exit; ``stoker run`` exits with the job's own exit code.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

bench_app = typer.Typer(help="Benchmarks measured through the real broker.", no_args_is_help=True)


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"stoker: {message}", err=True)
    raise typer.Exit(code)


def _credentials(url: str | None, token: str | None, token_file: Path | None) -> tuple[str, str]:
    """The broker's URL and the token to call it with: the options (``--token``, or the
    first line of ``--token-file``), else the client's configuration (environment, config
    file); a one-line error without a token."""
    from stoker.api.config import ClientConfig, ConfigError

    if token is not None and token_file is not None:
        _fail("give --token or --token-file, not both")
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            _fail(f"--token-file {token_file}: {getattr(exc, 'strerror', None) or exc}")
        if not token or "\n" in token:
            _fail(f"--token-file {token_file}: expected one line, the token")
    try:
        cfg = ClientConfig.load()
    except ConfigError as exc:
        _fail(str(exc))
    tok = token or cfg.token
    if not tok:
        _fail("no token: set STOKER_TOKEN or pass --token-file PATH")
    return url or cfg.url, str(tok)


def _client(url: str | None, token: str | None, token_file: Path | None) -> Any:
    from stoker.client import Client

    return Client(*_credentials(url, token, token_file))


def _call(
    url: str | None, token: str | None, token_file: Path | None, fn: Callable[[Any], Any]
) -> Any:
    """``fn(client)``; a refusal or an unreachable broker is a one-line error."""
    from stoker.client import StokerError

    try:
        with _client(url, token, token_file) as c:
            return fn(c)
    except StokerError as exc:
        _fail(str(exc))


def _table(title: str, columns: list[str], rows: list[list[Any]], fit: bool = False) -> None:
    """A rich table; ``fit``: lighter borders for at most 80 columns (cells cut before)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    t = (
        Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0, 0, 0))
        if fit
        else Table(title=title)
    )
    for c in columns:
        t.add_column(c, no_wrap=fit)
    for r in rows:
        t.add_row(*["" if v is None else str(v) for v in r])
    # a full table is never cut to the terminal's width (or to 80 columns without one)
    Console(width=None if fit else 10_000).print(t)


def _fmt_ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


UrlOpt = Annotated[str | None, typer.Option("--url", help="broker URL (default: $STOKER_URL)")]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token",
        help="API token (default: $STOKER_TOKEN). On the command line it is visible to every"
        " local user (ps, /proc): prefer $STOKER_TOKEN or --token-file",
    ),
]
TokenFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--token-file",
        metavar="PATH",
        help="read the API token from this file (one line; keep it mode 600)",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]


def _broker_config(config: Path | None, data_dir: Path | None) -> Any:
    from stoker.broker.config import BrokerConfig, ConfigError

    try:
        cfg = BrokerConfig.load(config) if config else BrokerConfig()
    except ConfigError as exc:
        _fail(str(exc))
    if data_dir is not None:
        cfg.data_dir = data_dir
    return cfg


ConfigOpt = Annotated[Path | None, typer.Option(help="broker TOML configuration")]
DataDirOpt = Annotated[Path | None, typer.Option(help="where the store and pods live")]


def up(
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    host: str = "127.0.0.1",
    port: int = 8765,
    keep_pods: Annotated[
        bool,
        typer.Option(help="leave the pods running on exit, for a restart that re-adopts them"),
    ] = False,
    kubernetes: Annotated[
        Path | None,
        typer.Option(help="run pods on Kubernetes, with this runtime settings TOML"),
    ] = None,
    database_url: Annotated[
        str | None,
        typer.Option(
            envvar="STOKER_DATABASE_URL",
            help="the store (postgresql://... for several replicas; default: SQLite)",
        ),
    ] = None,
    advertise_url: Annotated[
        str | None,
        typer.Option(
            envvar="STOKER_ADVERTISE_URL",
            help="where other replicas reach this one (default: http://HOST:PORT)",
        ),
    ] = None,
    runtime_dir: Annotated[
        Path | None, typer.Option(help="the pods' directory, shared by replicas on one host")
    ] = None,
    keys_dir: Annotated[
        Path | None,
        typer.Option(
            envvar="STOKER_KEYS_DIR",
            help="the keys and tokens every replica shares (a mounted Secret; read only)",
        ),
    ] = None,
) -> None:
    """Run the broker with the local runtime (or Kubernetes); its store is SQLite, or
    PostgreSQL shared by several replicas of which one leads (docs/guides/operating.md).

    SIGTERM or Ctrl-C stops it: open requests get a few seconds, then every pod is stopped
    (unless --keep-pods). One broker per data dir: a second one exits at once."""
    import os

    import sqlalchemy as sa
    import uvicorn

    from stoker.broker.app import Broker, BrokerLocked
    from stoker.broker.db import display_url
    from stoker.broker.secrets import KeysError
    from stoker.runtime.reaper import PARENT_ENV, die_with_parent

    if parent := os.environ.get(PARENT_ENV):  # a child broker (stoker bench local)
        die_with_parent(int(parent))  # SIGTERM when the owner dies: the pods are stopped
    cfg = _broker_config(config, data_dir)
    cfg.database_url = database_url or cfg.database_url
    cfg.advertise_url = advertise_url or cfg.advertise_url or f"http://{host}:{port}"
    cfg.runtime_root = runtime_dir or cfg.runtime_root
    cfg.keys_dir = keys_dir or cfg.keys_dir
    if problem := cfg.shared_keys_missing():
        _fail(problem)
    try:
        broker = Broker(cfg, _kube_runtime(kubernetes, cfg) if kubernetes else None)
    except (BrokerLocked, KeysError) as exc:
        _fail(str(exc))
    except (sa.exc.SQLAlchemyError, ImportError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0]
        _fail(f"database_url: cannot open {display_url(cfg.store_url)}: {first}")
    broker.stop_pods_on_close = not keep_pods
    if not kubernetes:
        _build_envs(broker)
    fd = os.open(cfg.pid_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"{os.getpid()} http://{host}:{port}\n")
    typer.echo(
        f"stoker broker on http://{host}:{port}  (admin token: {cfg.admin_token_path})\n"
        f"dashboard: http://{host}:{port}/  (viewer token: {broker.dashboard.auth.token_path})",
        err=True,
    )
    try:
        uvicorn.run(
            broker.app,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,  # a line per request is work even when nobody reads it
            # no X-Forwarded-* rewriting per request: the broker reads neither the client's
            # address nor the scheme, and a replica forwards with headers of its own
            proxy_headers=False,
            server_header=False,
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        )
    finally:
        with contextlib.suppress(OSError, IndexError):
            if cfg.pid_path.read_text().split()[0] == str(os.getpid()):
                cfg.pid_path.unlink()


def _build_envs(broker: Any) -> None:
    """Build the profiles' environments before serving, with a progress bar on stderr
    (uv's builds take seconds to minutes); a build that fails is a one-line error."""
    from rich.console import Console

    from stoker.cli.progress import steps
    from stoker.runtime.envs import EnvBuildError

    building = [p for p in broker.cfg.profiles if p.runtime.packages]
    if not building:
        return
    with steps(Console(stderr=True)) as bar:
        task = bar.add_task("environments", total=len(building))
        for p in building:
            bar.update(task, description=f"building {p.name}'s environment (uv)")
            try:
                broker.prepare_env(p)
            except EnvBuildError as exc:
                bar.stop()
                # uv's first line says what failed, its last ones why (a TLS error, a name)
                lines = str(exc).strip().splitlines()
                why = "\n".join(f"  {line}" for line in lines[1:][-15:])
                _fail(f"profiles.{p.name}.packages: {lines[0]}" + (f"\n{why}" if why else ""))
            bar.advance(task)
        bar.update(task, description="environments ready")


#: seconds open requests get to finish when the broker is told to stop
SHUTDOWN_GRACE_S = 5


def down(
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    timeout: Annotated[float, typer.Option(help="seconds to wait before SIGKILL")] = 30.0,
) -> None:
    """Stop the broker of a data dir and every pod it left (also after a crash)."""
    import asyncio
    import os
    import signal

    from filelock import FileLock, Timeout

    cfg = _broker_config(config, data_dir)
    if not cfg.data_dir.is_dir():
        _fail(f"--data-dir: no data dir {cfg.data_dir}")
    lock = FileLock(cfg.lock_path, thread_local=False)
    pid = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        pid = int(cfg.pid_path.read_text().split()[0])
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if pid is None:
            _fail(f"a broker holds {cfg.data_dir} but left no pid file")
        os.kill(pid, signal.SIGTERM)
        try:
            lock.acquire(timeout=timeout)
        except Timeout:
            os.kill(pid, signal.SIGKILL)
            lock.acquire(timeout=10)
        typer.echo(f"stoker: broker {pid} stopped", err=True)
    try:
        stopped = asyncio.run(_stop_pods(cfg))
    finally:
        lock.release()
    if stopped:
        typer.echo(f"stoker: stopped {stopped} pods it left", err=True)


async def _stop_pods(cfg: Any) -> int:
    """Adopt and stop every pod still alive under the data dir (caller holds its lock)."""
    if not cfg.runtime_dir.is_dir():
        return 0
    from stoker.runtime.local import LocalRuntime

    rt = LocalRuntime(cfg.runtime_dir, gpu_slots=cfg.gpu_slots)
    try:
        pods = await rt.live_pods()
        await rt.stop_all()
    finally:
        await rt.close()
    return len(pods)


def _kube_runtime(path: Path, cfg: Any) -> Any:
    """The Kubernetes runtime on the cluster this process runs in (or $KUBECONFIG's); a
    cluster without one ready GPU node is refused here, with a one-line message."""
    import os

    try:
        from lightkube import ApiError, Client
        from lightkube.core.exceptions import ConfigError as KubeConfigError
        from lightkube.resources.core_v1 import Node

        from stoker.runtime.kubernetes.runtime import KubernetesRuntime
        from stoker.runtime.kubernetes.settings import KubeSettings
    except ImportError as exc:
        _fail(f"--kubernetes: {exc}; install stoker[kubernetes]")
    try:
        settings = KubeSettings.load(path)
        rt = KubernetesRuntime(
            settings,
            [p.core for p in cfg.profiles],
            code_dir=cfg.runtime_dir / "code",
            own_pod=os.environ.get("POD_NAME"),  # the Deployment's downward API: the leader label
        )
        with Client(namespace=settings.namespace) as client:
            rt.use_nodes([n.to_dict() for n in client.list(Node)])
    except (ValueError, ApiError, KubeConfigError, OSError) as exc:
        _fail(f"--kubernetes: {exc}")
    if not rt.devices:
        _fail("--kubernetes: no ready node with allocatable GPUs in the cluster")
    return rt


#: code archives from this size up are uploaded with a progress bar
UPLOAD_PROGRESS_BYTES = 1024 * 1024


def _upload(client: Any, code: Path) -> bytes:
    """Pack ``--code DIR`` and upload it (a progress bar on stderr when it is large);
    returns the archive, which the broker then holds."""
    from rich.console import Console
    from rich.progress import DownloadColumn, Progress, TransferSpeedColumn

    from stoker.client import pack_code

    data = pack_code(code)
    if len(data) < UPLOAD_PROGRESS_BYTES:
        client.upload(data)
        return data
    columns = (*Progress.get_default_columns(), DownloadColumn(), TransferSpeedColumn())
    with Progress(*columns, console=Console(stderr=True)) as bar:
        task = bar.add_task(f"uploading {code.name}", total=len(data))
        client.upload(data, progress=lambda sent, _total: bar.update(task, completed=sent))
    return data


def run(
    argv: Annotated[list[str], typer.Argument(help="the job's command, after --")],
    profile: Annotated[str, typer.Option("--profile", "-p")],
    tag: Annotated[str | None, typer.Option("--tag", "-t", help="reuse tag")] = None,
    code: Annotated[Path | None, typer.Option(help="directory uploaded as the job's code")] = None,
    dep: Annotated[list[str], typer.Option("--dep", help="extra dependency (repeat)")] = [],  # noqa: B006
    env: Annotated[list[str], typer.Option("--env", help="K=V (repeat)")] = [],  # noqa: B006
    secret: Annotated[
        list[str], typer.Option("--secret", help="a secret's name, set as that env var (repeat)")
    ] = [],  # noqa: B006
    timeout: Annotated[float | None, typer.Option(help="seconds the job may run")] = None,
    job_class: Annotated[
        str, typer.Option("--class", help="pool (warm pools), hp (guaranteed) or spot")
    ] = "pool",
    workers: Annotated[int, typer.Option(help="pods placed together; rank i in the i-th")] = 1,
    gpus: Annotated[
        float | None, typer.Option(help="GPUs per worker (below 1 shares a card)")
    ] = None,
    guarantee_s: Annotated[
        float | None, typer.Option("--guarantee-s", help="spot: the guaranteed run time")
    ] = None,
    label: Annotated[
        list[str], typer.Option("--label", help="k=v, the job's own tag for ps --label (repeat)")
    ] = [],  # noqa: B006
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="print the job's id and exit at once")
    ] = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run a job, stream its output, and exit with its exit code (``--detach``: print its
    id and return; ``stoker logs ID -f`` follows it). A spot job that is preempted says so
    on stderr and runs again (its output goes on)."""
    from stoker.api.models import parse_label
    from stoker.client import JobShape, StokerError

    envs: dict[str, str] = {}
    for item in env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            _fail(f"--env: expected K=V, got {item!r}")
        envs[key] = value
    labels: dict[str, str] = {}
    for item in label:
        try:
            k, v = parse_label(item)
        except ValueError as exc:
            _fail(f"--label: {exc}")
        labels[k] = v
    shape = JobShape(job_class, workers, gpus, guarantee_s)

    def preempted(row: dict[str, Any]) -> None:
        typer.echo(
            f"stoker: job {row['id']} {row['requeue_reason']} (re-queued, run"
            f" {row['requeues'] + 1} next)",
            err=True,
        )

    try:
        with _client(url, token, token_file) as c:
            packed = None if code is None else _upload(c, code)
            job = c.run(
                profile,
                list(argv),
                reuse_tag=tag,
                code=packed,
                deps=dep,
                env=envs,
                timeout_s=timeout,
                shape=shape,
                wait_s=0,  # streamed live from the start, every re-queue notice heard
                secrets=secret,
                labels=labels,
            )
            if detach:
                typer.echo(json.dumps(job.info) if as_json else job.id)
                return
            job.on_requeue = preempted
            captured: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
            for stream, data in job.stream():
                if as_json:
                    captured[stream].append(data)
                else:
                    out = sys.stdout if stream == "stdout" else sys.stderr
                    out.buffer.write(data)
                    out.flush()
            row = job.info if job.info.get("state") == "finished" else job.wait()
    except StokerError as exc:
        _fail(str(exc))
    if as_json:
        text = {k: b"".join(v).decode(errors="replace") for k, v in captured.items()}
        typer.echo(json.dumps({**row, **text}))
    elif row["failure"] not in (None, "user_error"):
        typer.echo(f"stoker: job {row['id']} failed: {row['failure']}", err=True)
    code_ = row["exit_code"]
    raise typer.Exit(code_ if code_ is not None and 0 <= code_ < 256 else 1)


def ps(
    state: Annotated[list[str], typer.Option("--state", help="only these states")] = [],  # noqa: B006
    label: Annotated[list[str], typer.Option("--label", help="only jobs with k=v (repeat)")] = [],  # noqa: B006
    limit: int = 50,
    wide: Annotated[bool, typer.Option("--wide", help="full ids and tags, labels")] = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List your jobs (newest first); the table fits 80 columns (``--wide``: everything)."""
    from stoker.api.models import parse_label
    from stoker.cli.ids import short_id
    from stoker.core import JobState

    known = list(dict.fromkeys(s.shown.value for s in JobState))  # as the API shows them
    for s in state:
        if s not in known:
            _fail(f"--state: unknown state {s!r} (known: {', '.join(known)})")
    labels: dict[str, str] = {}
    for item in label:
        try:
            key, value = parse_label(item)
        except ValueError as exc:
            _fail(f"--label: {exc}")
        labels[key] = value
    jobs = _call(url, token, token_file, lambda c: c.jobs(state, limit, labels))
    if as_json:
        typer.echo(json.dumps(jobs))
        return
    # the tenant's column where it tells something: several tenants' jobs (the admin's
    # view; there start ms gives way to it in 80 columns, --wide has both)
    tenants = wide or len({j["tenant"] for j in jobs}) > 1
    latency = wide or not tenants
    columns = ["id", *(["tenant"] if tenants else []), "class", "profile", "tag", "state"]
    columns += ["path", *(["start ms"] if latency else []), "exit", "failure"]

    def cut(v: str | None, n: int) -> str | None:  # a long cell, shortened (unless --wide)
        return v if wide or v is None or len(v) <= n else v[: n - 1] + "…"

    rows = [
        [
            j["id"] if wide else short_id(j["id"]),
            *([cut(j["tenant"], 8)] if tenants else []),
            j["job_class"],
            cut(j["profile"], 8),
            cut(j["reuse_tag"], 8),
            j["state"],
            j["path"],
            *([_fmt_ms(j["start_latency_ms"])] if latency else []),
            j["exit_code"],
            cut(j["failure"], 10),
        ]
        + ([",".join(f"{k}={v}" for k, v in j["labels"].items())] if wide else [])
        for j in jobs
    ]
    _table("jobs", columns + (["labels"] if wide else []), rows, fit=not wide)
    for j in jobs:  # a queued job: why it waits (the core's answer, stored with the row)
        if j.get("waiting_reason"):
            job_id = j["id"] if wide else short_id(j["id"])
            typer.echo(f"{job_id} waits: {j['waiting_reason']}")


def pods(
    url: UrlOpt = None,
    token: TokenOpt = None,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List live pods (a tenant sees its own; the admin sees all)."""
    items = _call(url, token, token_file, lambda c: c.pods())
    if as_json:
        typer.echo(json.dumps(items))
        return
    rows = [
        [
            p["id"],
            p["profile"],
            p["state"],
            ",".join(p["gpus"]),
            p["tenant"],
            p["reuse_tag"],
            p["job"],
            p["jobs_run"],
        ]
        for p in items
    ]
    _table("pods", ["id", "profile", "state", "gpus", "tenant", "tag", "job", "jobs run"], rows)


def events(
    job: Annotated[str | None, typer.Option("--job", help="only this job's events")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 100,
    url: UrlOpt = None,
    token: TokenOpt = None,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Why the broker did what it did: each decision with its reason (oldest first)."""
    import datetime

    from stoker.cli.ids import resolve

    items = _call(
        url,
        token,
        token_file,
        lambda c: c.events(job=None if job is None else resolve(c, job), limit=limit),
    )
    if as_json:
        typer.echo(json.dumps(items))
        return
    rows = [
        [
            datetime.datetime.fromtimestamp(e["at"]).strftime("%H:%M:%S.%f")[:-3],
            e["kind"],
            e.get("job") or e.get("pod") or "",
            e["message"],
        ]
        for e in items
    ]
    _table("events" + (f" of {job}" if job else ""), ["at", "kind", "job / pod", "why"], rows)


def _num(v: float) -> str:
    return f"{v:g}"


def pools(
    url: UrlOpt = None,
    token: TokenOpt = None,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """GPU pools: capacity, HP and spot GPUs in use, spot quota, eta, eviction rate (1 d),
    the HP forecast's g-quantile per hour ahead, and the queued hp/spot jobs."""
    items = _call(url, token, token_file, lambda c: c.pools())
    if as_json:
        typer.echo(json.dumps(items))
        return
    rows = []
    for p in items:
        fc = p["forecast"]
        quantiles = "-" if fc is None else " ".join(f"{q:.1f}" for q in fc["quantile"])
        rows.append(
            [
                p["gpu_model"],
                _num(p["capacity"]),
                _num(round(p["hp_gpus"], 3)),
                _num(round(p["spot_gpus"], 3)),
                _num(round(p["spot_quota"], 3)),
                f"{p['eta']:.2f}",
                f"{p['eviction_rate_1d']:.3f}",
                quantiles if fc is None else f"{quantiles} (g={fc['g']})",
                f"{p['queued']['hp']}/{p['queued']['spot']}",
            ]
        )
    columns = ["GPU pool", "capacity", "hp", "spot", "spot quota", "eta", "evictions 1d"]
    _table("GPU pools", [*columns, "HP forecast by hour", "queued hp/spot"], rows)


def demo(
    jobs: Annotated[int, typer.Option(help="jobs in the agent loop")] = 12,
    preload: Annotated[
        list[str], typer.Option("--preload", help="module the pods import once, e.g. torch")
    ] = [],  # noqa: B006
    as_json: JsonOpt = False,
) -> None:
    """An agent loop of short jobs three ways on an embedded broker: the speedup of warm pods."""
    from stoker.broker.bench import run_demo

    if jobs < 2:
        _fail("--jobs: at least 2")
    res = run_demo(jobs, tuple(preload))
    if as_json:
        typer.echo(json.dumps(res))
        return
    rows = [
        [
            name,
            _fmt_ms(m["start_ms_p50"]),
            _fmt_ms(m["start_ms_p90"]),
            f"{m['loop_s']:.2f}",
            f"{m['speedup']:.1f}x",
            " ".join(f"{k}={v}" for k, v in m["paths"].items()),
        ]
        for name, m in res["modes"].items()
    ]
    _table(
        f"agent loop of {jobs} short jobs",
        ["mode", "start p50 ms", "start p90 ms", "loop s", "speedup", "paths"],
        rows,
    )


def bench_local(
    out: Annotated[Path, typer.Option(help="writes OUT/results.json")],
    warm_n: int = 100,
    cold_n: int = 5,
    handover_n: int = 10,
    throughput_s: float = 10.0,
    torch: Annotated[bool, typer.Option(help="also the torch-preloading profile")] = True,
    callers: Annotated[
        list[int] | None,
        typer.Option(help="callers of a throughput run (repeat; default: 4 and 16)"),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Start latency (warm/standby/cold), handover, throughput and idle memory, per profile;
    and OUT/calibration.json, the step durations `stoker sim firepool --calibration` uses."""
    from stoker.broker.bench import BENCH_PHASES, THROUGHPUT_CALLERS, run_bench

    runs = tuple(callers or THROUGHPUT_CALLERS)

    if torch:
        try:
            import torch as _torch  # noqa: F401 - only checks it is installed
        except ImportError:
            _fail("torch is not installed: pass --no-torch")
    from rich.console import Console

    from stoker.cli.progress import steps

    with steps(Console(stderr=True)) as progress:
        # the phases of each profile, then the calibration
        task = progress.add_task("bench", total=BENCH_PHASES * (2 if torch else 1) + 1)
        seen: list[str] = []

        def phase(name: str) -> None:
            if seen:  # the phase before this one is done
                progress.advance(task)
            seen.append(name)
            progress.update(task, description=name)

        try:
            res = run_bench(
                out, warm_n, cold_n, handover_n, throughput_s, torch, phase=phase, callers=runs
            )
        except ValueError as exc:  # checked before anything runs
            _fail(f"--{exc}")
        progress.advance(task)
    if as_json:
        typer.echo(json.dumps(res))
        return
    rows = []
    for name, p in res["profiles"].items():
        rows.append(
            [
                name,
                _fmt_ms(p["warm"]["start_ms_p50"]),
                _fmt_ms(p["warm"]["start_ms_p99"]),
                _fmt_ms(p["client"]["call_ms_p50"]),
                _fmt_ms(p["standby"]["start_ms_p50"]),
                _fmt_ms(p["cold"]["start_ms_p50"]),
                f"{p.get('cold_over_warm', 0):.0f}",
                _fmt_ms(p["handover_ms_p50"]),
                *(f"{t['jobs_per_s']:.0f}" for t in p["throughput"].values()),
                f"{p['idle_rss_mb']:.0f}",
            ]
        )
    load = res["host"]["loadavg_1m_start"], res["host"].get("loadavg_1m_end", 0.0)
    _table(
        f"stoker bench local -> {out / 'results.json'} (load average {load[0]:.1f} ->"
        f" {load[1]:.1f} on {res['host']['cpus']} CPUs)",
        [
            "profile",
            "warm p50",
            "warm p99",
            "call p50",
            "standby p50",
            "cold p50",
            "cold/warm",
            "handover p50",
            *(f"jobs/s {n} callers" for n in runs),
            "idle RSS MB",
        ],
        rows,
    )
    host = res["host"]
    typer.echo(
        f"host: kernel {host['kernel']}, cgroup {host['cgroup']}, seccomp {host['seccomp']}, "
        f"open files {host['open_files']['soft']}; stoker from {host['source']['path']} "
        f"({host['source']['fstype']}), venv {host['venv']['path']} ({host['venv']['fstype']})"
    )
    for name, p in res["profiles"].items():
        steps = ", ".join(f"{k} {v:.1f}" for k, v in p["warm"]["end_steps_ms"].items())
        typer.echo(f"{name}: a warm job's steps (p50 ms): {steps}")
        for flag in p["flags"]:
            typer.echo(f"{name}: FLAG {flag}")


secret_app = typer.Typer(
    help="Write-only tenant secrets, injected by name into jobs (run --secret NAME).",
    no_args_is_help=True,
)


@secret_app.command("set")
def secret_set(
    name: str,
    url: UrlOpt = None,
    token: TokenOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Set secret NAME; its value is read from stdin (or a hidden prompt), never argv."""
    if sys.stdin.isatty():
        value = typer.prompt(f"value of {name}", hide_input=True)
    else:
        value = sys.stdin.read()
        if value.endswith("\n"):
            value = value[:-1]  # what `echo` and here-strings add
    _call(url, token, token_file, lambda c: c.set_secret(name, value))
    typer.echo(f"stoker: secret {name} set", err=True)


@secret_app.command("list")
def secret_list(
    url: UrlOpt = None,
    token: TokenOpt = None,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Your secrets' names (values are never shown)."""
    items = _call(url, token, token_file, lambda c: c.secrets())
    if as_json:
        typer.echo(json.dumps(items))
        return
    _table("secrets", ["name", "updated"], [[i["name"], i["updated"]] for i in items])


@secret_app.command("delete")
def secret_delete(
    name: str, url: UrlOpt = None, token: TokenOpt = None, token_file: TokenFileOpt = None
) -> None:
    """Delete secret NAME (jobs that name it and have not started fail at bind)."""
    _call(url, token, token_file, lambda c: c.delete_secret(name))


config_app = typer.Typer(help="The broker's configuration file.", no_args_is_help=True)


@config_app.command("check")
def config_check(
    path: Annotated[Path, typer.Argument(help="a broker configuration TOML (stoker up --config)")],
) -> None:
    """Check a broker configuration without starting a broker: one line per error and a
    non-zero exit, else one line saying what it holds."""
    from stoker.broker.config import BrokerConfig, check_file

    errors = check_file(path)
    for line in errors:
        typer.echo(line, err=True)
    if errors:
        raise typer.Exit(2)
    cfg = BrokerConfig.load(path)
    preset = cfg.policies.preset or "the default preset"
    typer.echo(
        f"config {path}: ok ({len(cfg.profiles)} profiles: "
        f"{', '.join(p.name for p in cfg.profiles)}; {preset}; store "
        f"{'PostgreSQL' if cfg.database_url else 'SQLite'}; data dir {cfg.data_dir})"
    )


def register(app: typer.Typer, sim_app: typer.Typer) -> None:
    """Add the broker's commands to the ``stoker`` command."""
    app.add_typer(config_app, name="config")
    app.command()(up)
    app.command()(down)
    app.add_typer(secret_app, name="secret")
    app.command(context_settings={"allow_interspersed_args": False})(run)
    app.command()(ps)
    app.command()(pods)
    app.command()(events)
    app.command()(pools)
    app.command()(demo)
    bench_app.command("local")(bench_local)
    app.add_typer(bench_app, name="bench")
