"""The edges a new user hit (issue 35): top-level SDK errors, event paging, short ids
everywhere, run --label/--detach, ps's columns and width, a clean traceback, config check,
a CPU-only profile the slots cannot hold, and the set-up script's packages."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

import stoker
from stoker.broker.config import BrokerConfig, BrokerProfile, ConfigError
from stoker.broker.embedded import EmbeddedBroker
from stoker.cli.main import app

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    data = tmp_path_factory.mktemp("edges") / "data"
    cfg = BrokerConfig(data_dir=data, profiles=[BrokerProfile.simple("plain")], gpu_slots=2)
    with EmbeddedBroker(cfg) as eb:
        with stoker.Client(eb.url, eb.admin_token) as admin:
            token = admin.create_tenant("edge")
        yield {"STOKER_URL": eb.url, "STOKER_TOKEN": token, "ADMIN": eb.admin_token}


def test_sdk_errors_at_top_level() -> None:
    for name in ("InvalidRequest", "NotFound", "AuthenticationError", "BrokerUnavailable",
                 "StokerError", "TenantLimit", "StorageFull", "JobTimeout"):  # fmt: skip
        assert getattr(stoker, name) is getattr(stoker.client, name)
    with pytest.raises(AttributeError):
        stoker.Nope  # noqa: B018


def test_events_page_forward_from_a_cursor(env: dict[str, str]) -> None:
    with stoker.Client(env["STOKER_URL"], env["STOKER_TOKEN"]) as c:
        for i in range(3):
            c.run("plain", ["python", "-c", f"print({i})"], reuse_tag="ev").result(60)
        every = c.events(limit=1000)
        assert len(every) >= 6
        first = every[0]["seq"]
        page = c.events(after=first, limit=2)
        assert [e["seq"] for e in page] == [e["seq"] for e in every[1:3]]  # not the last two
        assert c.events(limit=2) == every[-2:]  # no cursor: the tail


def test_short_ids_labels_detach_and_ps_columns(env: dict[str, str]) -> None:
    runner = CliRunner()
    res = runner.invoke(
        app,
        ["run", "-p", "plain", "--label", "team=ml", "--detach", "--", "python", "-c", "pass"],
        env=env,
    )
    assert res.exit_code == 0, res.output
    job_id = res.stdout.strip()
    assert job_id.startswith("j-") and len(job_id) > 10
    with stoker.Client(env["STOKER_URL"], env["STOKER_TOKEN"]) as c:
        row = c.get(job_id)
        assert row["labels"] == {"team": "ml"}
        stoker.client.Job(c, row).wait(60)
    bad = runner.invoke(app, ["run", "-p", "plain", "--label", "no", "--", "true"], env=env)
    assert bad.exit_code == 2 and "--label" in bad.output
    short = job_id[:10]
    ev = runner.invoke(app, ["events", "--job", short, "--json"], env=env)
    assert ev.exit_code == 0, ev.output
    assert ev.stdout.count(job_id) >= 2  # its events, by its short id
    ps = runner.invoke(app, ["ps"], env=env)
    assert "class" in ps.stdout and "pool" in ps.stdout
    wide = runner.invoke(app, ["ps", "--wide"], env=env)  # no TTY here
    assert job_id in wide.stdout and "team=ml" in wide.stdout and "tenant" in wide.stdout
    assert max(map(len, wide.stdout.splitlines())) >= max(map(len, ps.stdout.splitlines()))
    admin = {**env, "STOKER_TOKEN": env["ADMIN"]}
    with stoker.Client(env["STOKER_URL"], env["ADMIN"]) as a:
        other = a.create_tenant("edge2")
    with stoker.Client(env["STOKER_URL"], other) as c:
        c.run("plain", ["true"], reuse_tag="x").result(60)
    mixed = runner.invoke(app, ["ps"], env=admin)
    assert "tenant" in mixed.stdout and "edge2" in mixed.stdout


def test_a_python_c_traceback_starts_with_the_jobs_code(env: dict[str, str]) -> None:
    with stoker.Client(env["STOKER_URL"], env["STOKER_TOKEN"]) as c:
        res = c.run("plain", ["python", "-c", "def f():\n    1/0\nf()"], reuse_tag="tb").result(60)
    err = res.stderr.decode()
    assert res.exit_code == 1 and "ZeroDivisionError" in err
    frames = [line for line in err.splitlines() if line.strip().startswith("File ")]
    assert frames and all('"<string>"' in f for f in frames), err  # no stoker frame, no host path


def test_config_check(tmp_path: Path) -> None:
    runner = CliRunner()
    good = tmp_path / "good.toml"
    good.write_text("gpu_slots = 1\n[profiles.p]\ngpus = 1\n")
    res = runner.invoke(app, ["config", "check", str(good)])
    assert res.exit_code == 0 and "ok (1 profiles: p" in res.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text('gpu_slots = "x"\nbogus = 1\n[profiles.p]\ngpus = 1\n')
    res = runner.invoke(app, ["config", "check", str(bad)])
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 2, res.output  # one line per error
    assert "gpu_slots" in lines[0] and "bogus" in lines[1]


def test_a_cpu_only_profile_the_slots_cannot_hold_is_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "cpu.toml"
    cfg.write_text("[profiles.v]\ngpus = 0\ncpus = 1.0\n[cpu_slots]\ncpus = 0\n")
    with pytest.raises(ConfigError, match=r"profiles\.v: a CPU-only pod takes 1 CPUs"):
        BrokerConfig.load(cfg)


def test_bootstrap_installs_postgresql_for_dev_only() -> None:
    script = (ROOT / "scripts" / "bootstrap.sh").read_text()
    dev = script.index('if [ "$mode" = dev ]; then')
    assert script.index("need_apt+=(postgresql)") > dev
    assert script.index("need_apt+=(bubblewrap)") < dev


def test_cp_copies_into_and_out_of_a_session(env: dict[str, str], tmp_path: Path) -> None:
    runner = CliRunner()
    src = tmp_path / "in.txt"
    src.write_text("through the workspace")
    res = runner.invoke(app, ["cp", str(src), "plain:cp-tag:data/in.txt"], env=env)
    assert res.exit_code == 0, res.output
    back = tmp_path / "out.txt"
    res = runner.invoke(app, ["cp", "plain:cp-tag:data/in.txt", str(back)], env=env)
    assert res.exit_code == 0, res.output
    assert back.read_text() == "through the workspace"
    # a refusal is one line and a non-zero exit
    res = runner.invoke(app, ["cp", "plain:cp-tag:nope.txt", str(back)], env=env)
    assert res.exit_code != 0 and "nope.txt" in res.output
    res = runner.invoke(app, ["cp", str(src), str(back)], env=env)
    assert res.exit_code != 0 and "PROFILE:TAG:PATH" in res.output
