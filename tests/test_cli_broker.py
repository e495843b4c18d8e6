"""``stoker run | ps | pods`` against a real broker; the one-line errors of bad input."""

from __future__ import annotations

import ast
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

import stoker
from stoker.broker.config import BrokerConfig, BrokerProfile
from stoker.broker.embedded import EmbeddedBroker, free_port
from stoker.cli.main import app

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) not installed"),
    pytest.mark.timeout(90),
]


@pytest.fixture(scope="module")
def eb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    cfg = BrokerConfig(
        data_dir=tmp_path_factory.mktemp("cli") / "data",
        profiles=[BrokerProfile.simple("plain")],
        gpu_slots=2,
    )
    with EmbeddedBroker(cfg) as broker:
        yield broker


@pytest.fixture(scope="module")
def env(eb: EmbeddedBroker) -> dict[str, str]:
    with stoker.Client(eb.url, eb.admin_token) as admin:
        token = admin.create_tenant("cli")
    return {"STOKER_URL": eb.url, "STOKER_TOKEN": token}


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


def test_tenant_create_list_delete(eb: EmbeddedBroker, env: dict[str, str]) -> None:
    runner = CliRunner()
    admin = {**env, "STOKER_TOKEN": eb.admin_token}
    made = runner.invoke(app, ["tenant", "create", "cli-tmp"], env=admin)
    assert made.exit_code == 0, made.output
    token = made.stdout.strip()
    assert token.startswith("stk_") and made.stdout.count("\n") == 1  # the token, once
    assert "cli-tmp" in runner.invoke(app, ["tenant", "list"], env=admin).stdout.split()
    as_new = {**env, "STOKER_TOKEN": token}
    assert runner.invoke(app, ["ps"], env=as_new).exit_code == 0
    again = runner.invoke(app, ["tenant", "create", "cli-tmp"], env=admin)
    assert again.exit_code == 2 and "exists" in again.stderr
    assert runner.invoke(app, ["tenant", "delete", "cli-tmp"], env=admin).exit_code == 0
    gone = runner.invoke(app, ["ps"], env=as_new)
    assert gone.exit_code == 2 and "unknown token" in gone.stderr  # the token stopped working
    missing = runner.invoke(app, ["tenant", "delete", "cli-tmp"], env=admin)
    assert missing.exit_code == 2 and "no tenant" in missing.stderr
    refused = runner.invoke(app, ["tenant", "list"], env=env)
    assert refused.exit_code == 2 and "admin" in refused.stderr


def test_logs_cancel_profiles_with_short_ids(env: dict[str, str]) -> None:
    runner = CliRunner()
    with stoker.Client(env["STOKER_URL"], env["STOKER_TOKEN"]) as c:
        done = c.run("plain", ["python", "-c", "print('logged')"]).result(60)
        slow = c.run("plain", ["python", "-c", "import time; time.sleep(60)"], wait_s=0)
    short = done.id[:10]
    res = runner.invoke(app, ["logs", short], env=env)
    assert res.exit_code == 0 and res.stdout == "logged\n"
    res = runner.invoke(app, ["logs", "-f", done.id], env=env)
    assert res.exit_code == 0 and res.stdout == "logged\n"
    res = runner.invoke(app, ["cancel", slow.id[:10]], env=env)
    assert res.exit_code == 0 and res.stdout.split() == [slow.id, "finished", "cancelled"]
    res = runner.invoke(app, ["logs", "j-nosuchjob"], env=env)
    assert res.exit_code == 2 and "no job" in res.stderr
    res = runner.invoke(app, ["profiles", "--json"], env=env)
    assert [p["name"] for p in json.loads(res.stdout)] == ["plain"]
    res = runner.invoke(app, ["profiles"], env=env)
    assert res.exit_code == 0 and "plain" in res.stdout


def test_ps_fits_80_columns_filters_and_checks_states(env: dict[str, str]) -> None:
    runner = CliRunner()
    with stoker.Client(env["STOKER_URL"], env["STOKER_TOKEN"]) as c:
        job = c.run("plain", ["true"], reuse_tag="a-rather-long-reuse-tag-" + "x" * 40)
        job.result(60)
        c.run("plain", ["true"], labels={"exp": "ps-7"}).result(60)
    wide_env = {**env, "COLUMNS": "200"}
    table = runner.invoke(app, ["ps"], env=wide_env)
    assert table.exit_code == 0 and job.id[:10] in table.stdout and job.id not in table.stdout
    assert max(len(line) for line in table.stdout.splitlines()) <= 80
    wide = runner.invoke(app, ["ps", "--wide"], env=wide_env)
    assert job.id in wide.stdout and "exp=ps-7" in wide.stdout
    only = json.loads(runner.invoke(app, ["ps", "--label", "exp=ps-7", "--json"], env=env).stdout)
    assert [j["labels"] for j in only] == [{"exp": "ps-7"}]
    bad = runner.invoke(app, ["ps", "--state", "done"], env=env)
    assert bad.exit_code == 2 and "unknown state 'done'" in bad.stderr and "finished" in bad.stderr
    bad = runner.invoke(app, ["ps", "--label", "novalue"], env=env)
    assert bad.exit_code == 2 and "--label" in bad.stderr


def test_errors_say_how_to_fix_the_url(env: dict[str, str]) -> None:
    runner = CliRunner()
    url = f"http://127.0.0.1:{free_port()}"
    res = runner.invoke(app, ["ps"], env={**env, "STOKER_URL": url})
    assert res.exit_code == 2 and url in res.stderr and "stoker up" in res.stderr
    assert res.stderr.strip().count("\n") == 0
    res = runner.invoke(app, ["ps"], env={**env, "STOKER_URL": env["STOKER_URL"] + "/api"})
    assert res.exit_code == 2 and "no stoker API" in res.stderr and "no path" in res.stderr
    res = runner.invoke(app, ["ps"], env={**env, "STOKER_URL": "127.0.0.1:8765"})
    assert res.exit_code == 2 and "not a URL" in res.stderr


def test_code_honours_ignore_files(env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "main.py").write_text("import os; print(sorted(os.listdir('.')))\n")
    (tmp_path / ".gitignore").write_text("*.log\nbuild/\n")
    (tmp_path / ".stokerignore").write_text("data.bin\n")
    (tmp_path / "run.log").write_text("noise")
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "x.o").write_text("obj")
    (tmp_path / "data.bin").write_bytes(b"0" * 1000)
    (tmp_path / "keep.txt").write_text("kept")
    runner = CliRunner()
    args = ["run", "-p", "plain", "--code", str(tmp_path), "--json", "--", "python", "main.py"]
    out = json.loads(runner.invoke(app, args, env=env).stdout)["stdout"]
    names = set(ast.literal_eval(out.strip()))
    assert {"main.py", "keep.txt", ".gitignore", ".stokerignore"} <= names
    assert not names & {"run.log", "build", "data.bin"}


def test_demo_runs_the_loop_three_ways() -> None:
    before = set(Path(tempfile.gettempdir()).glob("stoker-demo-*"))
    res = CliRunner().invoke(app, ["demo", "--jobs", "3", "--json"])
    # its brokers' data dirs lived in a temporary directory that is gone now
    assert set(Path(tempfile.gettempdir()).glob("stoker-demo-*")) <= before
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    modes = out["modes"]
    assert list(modes) == ["fresh pod per job", "fresh reuse tag per job", "warm reuse + standby"]
    assert modes["fresh pod per job"]["paths"]["cold"] == 3
    assert modes["warm reuse + standby"]["paths"]["warm"] == 2
    assert all(m["loop_s"] > 0 and m["start_ms_p50"] is not None for m in modes.values())


@pytest.mark.slow
@pytest.mark.timeout(300)  # every phase of the bench, small: its brokers, the deps' install
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
    for callers in ("4", "16"):
        run = plain["throughput"][callers]
        assert run["callers"] == int(callers) and run["jobs"] > 0 and run["errors"] == 0
        assert run["broker_cpu_ms_per_job"] > 0 and run["call_ms_p50"] > 0
        assert run["agent_cpu_ms_per_job"] >= 0 and run["jobs_cpu_ms_per_job"] > 0
    deps = plain["deps_layer"]  # the layer's saving: the import is done once per warm pod
    assert deps["n"] == 10 and deps["first_import_ms"] > 10 * deps["later_import_ms_p50"]
    steps = plain["warm"]["end_steps_ms"]
    assert set(steps) == {"queue_and_bind", "job", "drain_and_clean", "report", "commit"}
    assert plain["flags"] == [], plain["flags"]  # nothing on a warm job far above the rest
    host = json.loads((tmp_path / "results.json").read_text())["host"]
    assert host["kernel"] and host["cgroup"] and host["open_files"]["soft"] > 0


def test_bench_local_refuses_a_throughput_run_of_no_callers(tmp_path: Path) -> None:
    args = ["bench", "local", "--out", str(tmp_path), "--no-torch", "--callers", "0"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code != 0 and "--callers: at least 1" in res.output
    assert not (tmp_path / "results.json").exists()  # refused before anything ran


def test_client_config_errors_name_the_key_and_file(env: dict[str, str], tmp_path: Path) -> None:
    runner = CliRunner()
    conf = tmp_path / "stoker" / "client.toml"
    conf.parent.mkdir()
    base = {"XDG_CONFIG_HOME": str(tmp_path), "STOKER_URL": "", "STOKER_TOKEN": ""}
    cases = [
        ("tokn = 'x'\n", "unknown key 'tokn'"),
        ("token = 5\n", "token: Input should be a valid string"),
        ("url = ['http://h']\n", "url: Input should be a valid string"),
        ("url = \n", "client config"),
    ]
    for text, message in cases:
        conf.write_text(text)
        res = runner.invoke(app, ["ps"], env=base)
        assert res.exit_code == 2, (text, res.output)
        assert message in res.stderr and str(conf) in res.stderr, res.stderr
        assert res.stderr.strip().count("\n") == 0
    # a good file works, and the environment wins over it
    conf.write_text(f"url = '{env['STOKER_URL']}'\ntoken = 'stk_from_file'\n")
    res = runner.invoke(app, ["ps", "--json"], env={**base, "STOKER_TOKEN": env["STOKER_TOKEN"]})
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["ps"], env=base)
    assert res.exit_code == 2 and "unknown token" in res.stderr  # the file's token was sent


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[profiles.t]\npreload = 'torch'\n", "profiles.t.preload: Input should be a valid list"),
        ("gpu_slots = '2'\n", "gpu_slots: Input should be a valid integer"),
        ("colour = 'red'\n", "unknown key 'colour'"),
        ("[profiles.v]\ngpus = 0\nmin_warm = 'two'\n", "profiles.v.min_warm"),
        ("[profiles.v]\nkeepalive = 'forever'\n", "profiles.v.keepalive: unknown 'forever'"),
        ("[cpu_slots]\ncpus = -1\n", "cpu_slots.cpus: Input should be greater"),
        ("gpu_slots = \n", "broker.toml"),
    ],
)
def test_up_with_a_bad_config_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    conf = tmp_path / "broker.toml"
    conf.write_text(text)
    res = CliRunner().invoke(app, ["up", "--config", str(conf), "--data-dir", str(tmp_path)])
    assert res.exit_code == 2, res.output
    assert message in res.stderr and str(conf) in res.stderr, res.stderr
    assert res.stderr.strip().count("\n") == 0 and "Traceback" not in res.stderr


def test_a_large_code_upload_shows_progress(env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "blob.bin").write_bytes(os.urandom(3 * 1024 * 1024))  # incompressible
    (tmp_path / "main.py").write_text("import os; print(os.path.getsize('blob.bin'))\n")
    args = ["run", "-p", "plain", "--code", str(tmp_path), "--", "python", "main.py"]
    res = CliRunner().invoke(app, args, env=env)
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == str(3 * 1024 * 1024)
    assert f"uploading {tmp_path.name}" in res.stderr and "100%" in res.stderr
    # a small tree goes without a bar
    small = tmp_path / "small"
    small.mkdir()
    (small / "main.py").write_text("print('hi')\n")
    args = ["run", "-p", "plain", "--code", str(small), "--", "python", "main.py"]
    res = CliRunner().invoke(app, args, env=env)
    assert res.exit_code == 0 and res.stdout == "hi\n" and "uploading" not in res.stderr


def test_the_token_from_a_file_not_argv(env: dict[str, str], tmp_path: Path) -> None:
    # --token puts the token on argv, where any local user reads it (ps, /proc/PID/cmdline):
    # every command that takes it also reads one from a file, and its help says why
    runner = CliRunner()
    path = tmp_path / "token"
    path.write_text(env["STOKER_TOKEN"] + "\n")
    path.chmod(0o600)
    base = {"XDG_CONFIG_HOME": str(tmp_path), "STOKER_URL": env["STOKER_URL"]}
    # the file's token is the one sent: the option wins over the environment's
    for extra in ({"STOKER_TOKEN": ""}, {"STOKER_TOKEN": "stk_bad"}):
        res = runner.invoke(app, ["ps", "--json", "--token-file", str(path)], env=base | extra)
        assert res.exit_code == 0, res.output
        assert all(j["tenant"] == "cli" for j in json.loads(res.stdout))
    for args, message in (
        (["--token-file", str(tmp_path / "absent")], f"--token-file {tmp_path / 'absent'}"),
        (["--token-file", str(tmp_path)], f"--token-file {tmp_path}"),
        (["--token-file", str(path), "--token", "stk_x"], "not both"),
    ):
        res = runner.invoke(app, ["ps", *args], env={**base, "STOKER_TOKEN": ""})
        assert res.exit_code == 2 and message in res.stderr, (args, res.output)
        assert res.stderr.strip().count("\n") == 0 and "Traceback" not in res.stderr
    path.write_text("")
    res = runner.invoke(app, ["ps", "--token-file", str(path)], env=base)
    assert res.exit_code == 2 and "expected one line" in res.stderr
    # every command with --token: --token-file too, and --token's help names the risk
    import typer.main

    def commands(group: object) -> Iterator[object]:
        for cmd in getattr(group, "commands", {}).values():
            yield cmd
            yield from commands(cmd)

    with_token = 0
    for cmd in commands(typer.main.get_command(app)):
        opts = {o: p for p in getattr(cmd, "params", ()) for o in p.opts}
        if "--token" in opts:
            with_token += 1
            assert "--token-file" in opts, cmd.name
            assert "ps" in opts["--token"].help and "--token-file" in opts["--token"].help
    assert with_token >= 15
