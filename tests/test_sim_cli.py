"""``stoker sim firepool`` writes results.json and plots; same seed, same file."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from stoker.cli.sim_firepool import register

SMALL = [
    "--agent-steps",
    "6",
    "--rl-steps",
    "2",
    "--rl-rollouts",
    "4",
    "--mix-sessions",
    "24",
    "--mix-duration-s",
    "300",
    "--handover-agents",
    "10",
    "--handover-steps",
    "3",
    "--sweep-sessions",
    "8",
]


def _app() -> typer.Typer:
    app = typer.Typer()
    sim = typer.Typer()
    app.add_typer(sim, name="sim")
    register(app, sim)
    return app


def _run(out: Path, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(_app(), ["sim", "firepool", "--out", str(out), *SMALL, *extra])
    return result.exit_code, result.output


def test_writes_results_and_plots_deterministically(tmp_path: Path) -> None:
    code, output = _run(tmp_path / "a", "--seed", "5")
    assert code == 0, output
    results = json.loads((tmp_path / "a" / "results.json").read_text())
    for path in (
        ("agent_loop", "speedup"),
        ("rl_loop", "speedup"),
        ("start_latency_p90_s", "fresh_tag"),
        ("start_latency_p90_s", "warm_reuse"),
        ("handover_s", "no_standby"),
        ("handover_s", "standby"),
        ("keepalive", "capacity_ratio"),
        ("keepalive", "p90_start_s", "fitted"),
        ("keepalive", "p90_start_s", "always_on"),
        ("mix", "warm_or_standby_fraction"),
    ):
        node = results
        for key in path:
            node = node[key]
        assert isinstance(node, float), path
    assert results["agent_loop"]["speedup"] > 1.0
    assert len(results["sweep"]) == 12
    for png in ("start_latency_cdf.png", "held_gpus.png"):
        assert (tmp_path / "a" / png).read_bytes()[:4] == b"\x89PNG"
    code, output = _run(tmp_path / "b", "--seed", "5")
    assert code == 0, output
    same = (tmp_path / "b" / "results.json").read_text()
    assert same == (tmp_path / "a" / "results.json").read_text()
    code, output = _run(tmp_path / "c", "--seed", "6", "--no-sweep")
    assert code == 0, output
    assert (tmp_path / "c" / "results.json").read_text() != same


def test_bad_input_is_one_line_and_nonzero(tmp_path: Path) -> None:
    code, output = _run(tmp_path, "--mix-sessions", "0")
    assert code == 1
    assert "sessions" in output and "Traceback" not in output
