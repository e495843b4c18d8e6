"""The documentation site builds with ``mkdocs build --strict`` (a broken link, a nav entry
without its page or a page outside the nav fails it), and its reference pages, generated
at build time, name everything the code has: every CLI command, every config key, every
HTTP operation, every metric, the SDK's classes and exceptions."""

from __future__ import annotations

import asyncio
import html
import importlib.util
import os
import re
import subprocess
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[1]
_NEEDS = ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python", "mkdocs_gen_files")
_MISSING = [m for m in _NEEDS if importlib.util.find_spec(m.split(".")[0]) is None]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once for the module, strict. Without the docs toolchain the tests
    skip here and fail in CI (``CI`` set), where ``scripts/bootstrap.sh dev`` installs it."""
    if _MISSING:
        why = f"the docs toolchain is not installed ({', '.join(_MISSING)}): pip install -e .[dev]"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI: {why}", pytrace=False)
        pytest.skip(why)
    out = tmp_path_factory.mktemp("site")
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "DISABLE_MKDOCS_2_WARNING": "true",
        "NO_MKDOCS_2_WARNING": "1",
    }
    build = ["build", "--strict", "--quiet", "--config-file", "mkdocs.yml", "--site-dir"]
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", *build, str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def _text(site: Path, page: str) -> str:
    """A built page's text (tags stripped, entities decoded, whitespace collapsed)."""
    path = site / page / "index.html"
    assert path.is_file(), f"{page} is not in the built site"
    raw = path.read_text()
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", raw)).split())


def _keys(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, str | None]]:
    """Every key of the broker's TOML file, nested tables too (NAME for a table by name),
    with its Field description."""
    for name, info in model.model_fields.items():
        key = f"{prefix}{name}"
        yield key, info.description
        ann = info.annotation
        union = typing.get_origin(ann) in (typing.Union, types.UnionType)
        for arg in typing.get_args(ann) if union else (ann,):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                yield from _keys(arg, f"{key}.")
            elif typing.get_origin(arg) is dict:
                value = typing.get_args(arg)[1]
                if isinstance(value, type) and issubclass(value, BaseModel):
                    yield from _keys(value, f"{key}.NAME.")


def test_reference_pages_are_built(site: Path) -> None:
    for page in ("sdk", "config", "cli", "http-api", "metrics"):
        assert (site / "reference" / page / "index.html").is_file(), page
    # only the nav's pages are the site: the result dumps under docs/ are not copied
    stray = [
        p.relative_to(site)
        for p in site.rglob("*")
        if p.suffix in (".json", ".html") and not p.match("search/*") and p.name != "index.html"
    ]
    assert stray in ([], [Path("404.html")]), stray
    assert not (site / "gen").exists()


def test_config_reference_names_every_key(site: Path) -> None:
    from stoker.broker.config import _BrokerFile

    text = _text(site, "reference/config")
    keys = dict(_keys(_BrokerFile))
    assert {"gpu_slots", "profiles.NAME.gpus", "shares.tenants.NAME.weight"} <= set(keys)
    assert [k for k in keys if k not in text] == []
    # every key is described by its Field (the generator fails the build on one that is not)
    assert [k for k, desc in keys.items() if not desc] == []


def test_cli_reference_names_every_command_and_option(site: Path) -> None:
    import typer

    from stoker.cli.main import app

    def walk(cmd: typing.Any, path: str) -> Iterator[tuple[str, typing.Any]]:
        yield path, cmd
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, f"{path} {name}")

    text = _text(site, "reference/cli")
    commands = dict(walk(typer.main.get_command(app), "stoker"))
    assert {"stoker up", "stoker run", "stoker sim gfs", "stoker tenant delete"} <= set(commands)
    assert [c for c in commands if c not in text] == []
    params = [p for cmd in commands.values() for p in cmd.params]
    options = {o for p in params if p.param_type_name == "option" for o in p.opts}
    assert [o for o in options if o not in text] == []


def test_http_reference_names_every_operation(site: Path, tmp_path: Path) -> None:
    from stoker.broker.app import Broker
    from stoker.broker.config import BrokerConfig

    broker = Broker(BrokerConfig(data_dir=tmp_path))
    try:
        doc = broker.app.openapi()
    finally:
        asyncio.run(broker.close())
    text = _text(site, "reference/http-api")
    ops = [f"{m.upper()} {p}" for p, methods in doc["paths"].items() for m in methods]
    assert "POST /v1/jobs" in ops
    assert [op for op in ops if op not in text] == []
    assert [s for s in doc["components"]["schemas"] if s not in text] == []
    assert "/metrics" in text  # outside the document, listed too


def test_metrics_reference_names_every_metric(site: Path) -> None:
    from stoker.broker.metrics import BrokerGauges, BrokerMetrics

    metrics = BrokerMetrics()
    metrics.watch(BrokerGauges)
    exposed = re.findall(r"^# TYPE (\S+) (\S+)", metrics.render().decode(), re.M)
    text = _text(site, "reference/metrics")
    names = [n for n, _ in exposed]
    assert "stoker_spot_quota_gpus" in names
    assert [n for n in names if n not in text] == []


def test_sdk_reference_documents_clients_and_exceptions(site: Path) -> None:
    import stoker.client as sdk

    raw = (site / "reference" / "sdk" / "index.html").read_text()
    named = ["Client.run", "AsyncClient.run", "Session.files", *sdk.__all__]
    assert [n for n in named if f'id="stoker.client.{n}"' not in raw] == []
    assert ":class:`" not in raw and ":meth:`" not in raw  # reST roles shown as code
