"""``stoker sim firepool``: run the Firepool experiments, print a table, write results.json
and plots."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import typer


def register(app: typer.Typer, sim_app: typer.Typer) -> None:
    """Add ``firepool`` to the ``stoker sim`` group."""
    sim_app.command("firepool")(firepool)


def firepool(
    out: Path = typer.Option(Path("stoker-results/firepool"), help="Directory for the results."),
    seed: int = typer.Option(0, help="Seed of every random stream (same seed, same results)."),
    agent_callers: int = typer.Option(1, help="Agent loop: agents."),
    agent_steps: int = typer.Option(40, help="Agent loop: jobs per agent."),
    agent_run_s: float = typer.Option(1.0, help="Agent loop: median job run time (s)."),
    agent_think_s: float = typer.Option(1.5, help="Agent loop: median LLM think pause (s)."),
    rl_steps: int = typer.Option(12, help="RL loop: training steps."),
    rl_rollouts: int = typer.Option(16, help="RL loop: rollouts (each with a verifier) per step."),
    rl_train_s: float = typer.Option(3.0, help="RL loop: median training-step pause (s)."),
    mix_sessions: int = typer.Option(240, help="Mix: caller sessions (>= 3000 jobs at 240)."),
    mix_tenants: int = typer.Option(12, help="Mix: tenants."),
    mix_duration_s: float = typer.Option(3600.0, help="Mix: window sessions arrive in (s)."),
    mix_bursts: int = typer.Option(6, help="Mix: burst windows."),
    handover_agents: int = typer.Option(16, help="Handover: agents on one 8-GPU node."),
    handover_steps: int = typer.Option(25, help="Handover: jobs per agent."),
    sweep: bool = typer.Option(True, help="Run the pod-start x pause sensitivity sweep."),
    sweep_sessions: int = typer.Option(120, help="Sweep: mix sessions per point."),
    calibration: Path | None = typer.Option(
        None,
        help="calibration.json from `stoker bench local`: bind, rebind, recycle, promotion "
        "and stop drawn from its measurements (pod start stays the paper's)",
    ),
) -> None:
    """Run the Firepool experiments on the simulator and write DIR/results.json and plots."""
    from rich.console import Console
    from rich.table import Table

    from stoker.api.calibration import Calibration
    from stoker.cli.progress import steps
    from stoker.sim import plots
    from stoker.sim.firepool import EXPERIMENTS, FirepoolConfig, run_all
    from stoker.sim.params import Dist
    from stoker.sim.report_html import render

    console = Console()
    try:
        base = FirepoolConfig()
        runtime = base.runtime
        if calibration is not None:
            runtime = runtime.calibrated(Calibration.load(calibration), str(calibration))
        cfg = replace(
            base,
            seed=seed,
            runtime=runtime,
            agent=replace(
                base.agent,
                callers=agent_callers,
                steps=agent_steps,
                run=Dist("lognormal", agent_run_s, base.agent.run.b),
                think=Dist("lognormal", agent_think_s, base.agent.think.b),
            ),
            rl=replace(
                base.rl,
                steps=rl_steps,
                rollouts=rl_rollouts,
                train=Dist("lognormal", rl_train_s, base.rl.train.b),
            ),
            # room for every rollout and its verifier at once: ceil(2 x rollouts / 8) nodes
            rl_cluster=replace(base.rl_cluster, nodes=max(1, -(-2 * rl_rollouts // 8))),
            mix=replace(
                base.mix,
                sessions=mix_sessions,
                tenants=mix_tenants,
                duration_s=mix_duration_s,
                bursts=mix_bursts,
            ),
            handover_agents=handover_agents,
            handover_steps=handover_steps,
            sweep_pod_start=base.sweep_pod_start if sweep else (),
            sweep_pause=base.sweep_pause if sweep else (),
            sweep_sessions=sweep_sessions,
        )
        t0 = time.perf_counter()
        with steps(console) as bar:
            task = bar.add_task("firepool", total=len(EXPERIMENTS))
            outcome = run_all(cfg, lambda name: bar.update(task, advance=1, description=name))
        elapsed = time.perf_counter() - t0
        out.mkdir(parents=True, exist_ok=True)
        results_path = out / "results.json"
        results_path.write_text(json.dumps(outcome.results, indent=2, sort_keys=True) + "\n")
        runs = outcome.mix_runs
        cdf = plots.start_latency_cdf(runs, out / "start_latency_cdf.png")
        held = plots.held_over_time(
            {"always_on": runs["always_on"], "fixed": runs["firepool"], "fitted": runs["fitted"]},
            out / "held_gpus.png",
        )
        report = render(out)
    except (ValueError, OSError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from exc
    console.print(_table(outcome.results, Table))
    console.print(f"wrote {results_path}, {cdf}, {held}, {report} ({elapsed:.1f} s simulated work)")


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "n/a"
    return f"{value:.3g}{unit}" if isinstance(value, float) else f"{value}{unit}"


def _table(r: dict[str, Any], table_cls: Any) -> Any:
    t = table_cls(title="stoker sim firepool (figures from the simulated records)")
    t.add_column("figure")
    t.add_column("value", justify="right")
    t.add_column("detail")
    a, rl, p90, h, ka, mx = (
        r["agent_loop"],
        r["rl_loop"],
        r["start_latency_p90_s"],
        r["handover_s"],
        r["keepalive"],
        r["mix"],
    )
    t.add_row(
        "agent_loop.speedup",
        _fmt(a["speedup"], "x"),
        f"loop {_fmt(a['loop_s']['fresh_pod'], ' s')} fresh pod -> "
        f"{_fmt(a['loop_s']['warm_reuse'], ' s')} warm reuse",
    )
    t.add_row(
        "rl_loop.speedup",
        _fmt(rl["speedup"], "x"),
        f"loop {_fmt(rl['loop_s']['fresh_pod'], ' s')} -> {_fmt(rl['loop_s']['warm_reuse'], ' s')}",
    )
    t.add_row("start p90 fresh_tag", _fmt(p90["fresh_tag"], " s"), "mix, new reuse tag per job")
    t.add_row("start p90 warm_reuse", _fmt(p90["warm_reuse"], " s"), "mix, warm reuse, no standby")
    t.add_row("start p90 firepool", _fmt(p90["firepool"], " s"), "mix, warm reuse + standby")
    t.add_row(
        "handover no_standby",
        _fmt(h["no_standby"], " s"),
        f"median of {h['no_standby_samples']}, p90 {_fmt(h['no_standby_p90'], ' s')}",
    )
    t.add_row(
        "handover standby",
        _fmt(h["standby"], " s"),
        f"median of {h['standby_samples']}, p90 {_fmt(h['standby_p90'], ' s')}",
    )
    t.add_row(
        "keepalive.capacity_ratio",
        _fmt(ka["capacity_ratio"]),
        f"fitted/always-on GPU-s; p90 {_fmt(ka['p90_start_s']['fitted'], ' s')} vs "
        f"{_fmt(ka['p90_start_s']['always_on'], ' s')}",
    )
    t.add_row(
        "mix.warm_or_standby_fraction",
        _fmt(mx["warm_or_standby_fraction"]),
        f"{mx['requests']} requests; warm {_fmt(mx['warm_fraction'])}, "
        f"standby {_fmt(mx['standby_fraction'])}",
    )
    return t
