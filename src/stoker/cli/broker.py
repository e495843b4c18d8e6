"""``stoker up | run | ps | pods | pools | demo | bench local``: the live broker, from
the command line.

Data commands print rich tables, or JSON with ``--json``. Errors are one line on stderr
and a nonzero exit; ``stoker run`` exits with the job's own exit code.
"""

from __future__ import annotations

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


def _client(url: str | None, token: str | None) -> Any:
    from stoker.api.config import ClientConfig, ConfigError
    from stoker.client import Client

    try:
        cfg = ClientConfig.load()
    except ConfigError as exc:
        _fail(str(exc))
    tok = token or cfg.token
    if not tok:
        _fail("no token: set STOKER_TOKEN or pass --token")
    return Client(url or cfg.url, tok)


def _table(title: str, columns: list[str], rows: list[list[Any]], fit: bool = False) -> None:
    """A rich table; ``fit``: lighter borders for at most 80 columns (cells cut before)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    t = (
        Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1, 0, 0))
        if fit
        else Table(title=title)
    )
    for c in columns:
        t.add_column(c, no_wrap=fit)
    for r in rows:
        t.add_row(*["" if v is None else str(v) for v in r])
    Console().print(t)


def _listing(
    url: str | None, token: str | None, as_json: bool, fetch: Callable[[Any], list[Any]]
) -> list[Any] | None:
    """What ``fetch`` reads from the broker, or None once printed as JSON (``--json``);
    a refusal is the one-line error."""
    from stoker.client import StokerError

    try:
        with _client(url, token) as c:
            items = fetch(c)
    except StokerError as exc:
        _fail(str(exc))
    if as_json:
        typer.echo(json.dumps(items))
        return None
    return items


def _fmt_ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


UrlOpt = Annotated[str | None, typer.Option("--url", help="broker URL (default: $STOKER_URL)")]
TokenOpt = Annotated[str | None, typer.Option("--token", help="API token (default: $STOKER_TOKEN)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]


def up(
    config: Annotated[Path | None, typer.Option(help="broker TOML configuration")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="where the store and pods live")] = None,
    host: str = "127.0.0.1",
    port: int = 8765,
) -> None:
    """Run the broker with the local runtime and the embedded SQLite store."""
    import uvicorn

    from stoker.broker.app import Broker
    from stoker.broker.config import BrokerConfig, ConfigError

    try:
        cfg = BrokerConfig.load(config) if config else BrokerConfig()
    except ConfigError as exc:
        _fail(str(exc))
    if data_dir is not None:
        cfg.data_dir = data_dir
    broker = Broker(cfg)
    typer.echo(
        f"stoker broker on http://{host}:{port}  (admin token: {cfg.admin_token_path})", err=True
    )
    uvicorn.run(broker.app, host=host, port=port, log_level="warning")


def run(
    argv: Annotated[list[str], typer.Argument(help="the job's command, after --")],
    profile: Annotated[str, typer.Option("--profile", "-p")],
    tag: Annotated[str | None, typer.Option("--tag", "-t", help="reuse tag")] = None,
    code: Annotated[Path | None, typer.Option(help="directory uploaded as the job's code")] = None,
    dep: Annotated[list[str], typer.Option("--dep", help="extra dependency (repeat)")] = [],  # noqa: B006
    env: Annotated[list[str], typer.Option("--env", help="K=V (repeat)")] = [],  # noqa: B006
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
    url: UrlOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run a job, stream its output, and exit with its exit code. A spot job that is
    preempted says so on stderr and runs again (its output goes on)."""
    from stoker.client import JobShape, StokerError

    envs: dict[str, str] = {}
    for item in env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            _fail(f"--env: expected K=V, got {item!r}")
        envs[key] = value
    shape = JobShape(job_class, workers, gpus, guarantee_s)

    def preempted(row: dict[str, Any]) -> None:
        typer.echo(
            f"stoker: job {row['id']} {row['requeue_reason']} (re-queued, run"
            f" {row['requeues'] + 1} next)",
            err=True,
        )

    try:
        with _client(url, token) as c:
            job = c.run(
                profile,
                list(argv),
                reuse_tag=tag,
                code=code,
                deps=dep,
                env=envs,
                timeout_s=timeout,
                shape=shape,
                wait_s=0,  # streamed live from the start, every re-queue notice heard
            )
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
    as_json: JsonOpt = False,
) -> None:
    """List your jobs (newest first); the table fits 80 columns (``--wide``: everything)."""
    from stoker.api.models import parse_label
    from stoker.cli.jobs import short_id
    from stoker.core import JobState

    known = [s.value for s in JobState]
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
    jobs = _listing(url, token, as_json, lambda c: c.jobs(state, limit, labels))
    if jobs is None:
        return
    columns = ["id", "profile", "tag", "state", "path", "start ms", "exit", "failure"]

    def cut(v: str | None, n: int) -> str | None:  # a long cell, shortened (unless --wide)
        return v if wide or v is None or len(v) <= n else v[: n - 1] + "…"

    rows = [
        [
            j["id"] if wide else short_id(j["id"]),
            cut(j["profile"], 8),
            cut(j["reuse_tag"], 10),
            j["state"],
            j["path"],
            _fmt_ms(j["start_latency_ms"]),
            j["exit_code"],
            cut(j["failure"], 10),
        ]
        + ([",".join(f"{k}={v}" for k, v in j["labels"].items())] if wide else [])
        for j in jobs
    ]
    _table("jobs", columns + (["labels"] if wide else []), rows, fit=not wide)


def pods(url: UrlOpt = None, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """List live pods (a tenant sees its own; the admin sees all)."""
    items = _listing(url, token, as_json, lambda c: c.pods())
    if items is None:
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


def _num(v: float) -> str:
    return f"{v:g}"


def pools(url: UrlOpt = None, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """GPU pools: capacity, HP and spot GPUs in use, spot quota, eta, eviction rate (1 d),
    the HP forecast's g-quantile per hour ahead, and the queued hp/spot jobs."""
    items = _listing(url, token, as_json, lambda c: c.pools())
    if items is None:
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
    as_json: JsonOpt = False,
) -> None:
    """Start latency (warm/standby/cold), handover, throughput and idle memory, per profile."""
    from stoker.broker.bench import run_bench

    if torch:
        try:
            import torch as _torch  # noqa: F401 - only checks it is installed
        except ImportError:
            _fail("torch is not installed: pass --no-torch")
    res = run_bench(out, warm_n, cold_n, handover_n, throughput_s, torch)
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
                f"{p['throughput']['jobs_per_s']:.0f}",
                f"{p['idle_rss_mb']:.0f}",
            ]
        )
    _table(
        f"stoker bench local -> {out / 'results.json'}",
        [
            "profile",
            "warm p50",
            "warm p99",
            "call p50",
            "standby p50",
            "cold p50",
            "cold/warm",
            "handover p50",
            "jobs/s",
            "idle RSS MB",
        ],
        rows,
    )


def register(app: typer.Typer, sim_app: typer.Typer) -> None:
    """Add the broker's commands to the ``stoker`` command."""
    app.command()(up)
    app.command(context_settings={"allow_interspersed_args": False})(run)
    app.command()(ps)
    app.command()(pods)
    app.command()(pools)
    app.command()(demo)
    bench_app.command("local")(bench_local)
    app.add_typer(bench_app, name="bench")
