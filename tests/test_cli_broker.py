"""``stoker run | ps | pods`` against a real broker; the one-line errors of bad input."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

import stoker
from stoker.broker.config import BrokerConfig, BrokerProfile
from stoker.broker.embedded import EmbeddedBroker
from stoker.cli.main import app

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) not installed"),
    pytest.mark.timeout(90),
]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    cfg = BrokerConfig(
        data_dir=tmp_path_factory.mktemp("cli") / "data",
        profiles=[BrokerProfile.simple("plain")],
        gpu_slots=2,
    )
    with EmbeddedBroker(cfg) as eb:
        with stoker.Client(eb.url, eb.admin_token) as admin:
            token = admin.create_tenant("cli")
        yield {"STOKER_URL": eb.url, "STOKER_TOKEN": token}


def test_run_streams_and_exits_with_the_jobs_code(env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "main.py").write_text("import os, sys\nprint('hi', os.environ['K'])\nsys.exit(3)\n")
    runner = CliRunner()
    args = ["run", "--profile", "plain", "--tag", "t", "--code", str(tmp_path), "--env", "K=v"]
    res = runner.invoke(app, [*args, "--", "python", "main.py"], env=env)
    assert res.exit_code == 3, res.output
    assert "hi v" in res.stdout
    res = runner.invoke(
        app, ["run", "-p", "plain", "--json", "--", "python", "-c", "pass"], env=env
    )
    assert res.exit_code == 0 and json.loads(res.stdout)["state"] == "finished"
    res = runner.invoke(
        app, ["run", "-p", "plain", "--json", "--", "python", "-c", "print('x')"], env=env
    )
    assert (json.loads(res.stdout)["stdout"], json.loads(res.stdout)["stderr"]) == ("x\n", "")


def test_ps_and_pods_json(env: dict[str, str]) -> None:
    runner = CliRunner()
    assert (
        runner.invoke(app, ["run", "-p", "plain", "-t", "p", "--", "true"], env=env).exit_code == 0
    )
    jobs = json.loads(runner.invoke(app, ["ps", "--json"], env=env).stdout)
    assert jobs and all(j["tenant"] == "cli" for j in jobs)
    pods = json.loads(runner.invoke(app, ["pods", "--json"], env=env).stdout)
    assert any(p["reuse_tag"] == "p" for p in pods)
    table = runner.invoke(app, ["ps"], env={**env, "COLUMNS": "200"})
    assert table.exit_code == 0 and "finished" in table.stdout


def test_bad_input_is_one_line_and_nonzero(env: dict[str, str]) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["run", "-p", "plain", "--env", "novalue", "--", "true"], env=env)
    assert res.exit_code == 2 and res.stderr.strip().count("\n") == 0 and "--env" in res.stderr
    res = runner.invoke(app, ["run", "-p", "nope", "--", "true"], env=env)
    assert res.exit_code == 2 and "body.profile" in res.stderr
    res = runner.invoke(app, ["ps"], env={**env, "STOKER_TOKEN": "stk_bad"})
    assert res.exit_code == 2 and "authorization" in res.stderr


def test_demo_runs_the_loop_three_ways() -> None:
    res = CliRunner().invoke(app, ["demo", "--jobs", "3", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    modes = out["modes"]
    assert list(modes) == ["fresh pod per job", "fresh reuse tag per job", "warm reuse + standby"]
    assert modes["fresh pod per job"]["paths"]["cold"] == 3
    assert modes["warm reuse + standby"]["paths"]["warm"] == 2
    assert all(m["loop_s"] > 0 and m["start_ms_p50"] is not None for m in modes.values())


@pytest.mark.slow
def test_bench_local_writes_results(tmp_path: Path) -> None:
    args = ["bench", "local", "--out", str(tmp_path), "--warm-n", "5", "--cold-n", "2"]
    args += ["--handover-n", "2", "--throughput-s", "1", "--no-torch", "--json"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    plain = json.loads((tmp_path / "results.json").read_text())["profiles"]["plain"]
    for key in ("warm", "cold", "standby", "throughput"):
        assert key in plain
    assert plain["warm"]["n"] == 5 and plain["idle_rss_mb"] > 0
    assert plain["client"]["n"] == 5 and plain["client"]["call_ms_p50"] > 0
