"""The evaluation pages' tables are what scripts/render_docs.py renders from results/ now:
a figure edited by hand, or a results file changed without rerendering, fails here."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "render_docs.py"
PAGES = sorted((ROOT / "docs" / "evaluation").glob("*.md"))


def _render_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("render_docs", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_check_command_finds_every_page_current() -> None:
    env = {**os.environ, "MPLBACKEND": "Agg"}
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_each_table_equals_what_the_results_render_to(page: Path) -> None:
    rd = _render_docs()
    text = page.read_text()
    found = rd.MARKER.findall(text)
    assert found, f"{page.name} has no marked table"
    for _, name, body, _ in found:
        assert body == rd.TABLES[name](), f"{page.name}: table {name} differs from results/"
    # every Markdown table on the page but the hand-kept ones named here is a marked one
    outside = rd.MARKER.sub("", text)
    rules = [line for line in outside.splitlines() if re.match(r"\|( ?-+:? ?\|)+$", line)]
    assert len(rules) <= 1, f"{page.name}: a table outside the markers ({rules})"
    assert len(text.splitlines()) <= 400


def test_a_figure_edited_by_hand_is_caught() -> None:
    rd = _render_docs()
    text = (ROOT / "docs" / "evaluation" / "firepool.md").read_text()
    edited = text.replace("| 7.7x |", "| 13.0x |", 1)
    assert edited != text
    assert rd.render_page(edited) == text


def _pattern(ref: str) -> str:
    """A cited path as a regex: `{a,b}` either, `*` any name, a folder all below it."""
    ref = re.escape(ref.rstrip("/") if ref.endswith("/") else ref) + (
        "(/.*)?" if ref.endswith("/") else ""
    )
    ref = re.sub(r"\\\{([^}]*)\\\}", lambda m: "(" + m.group(1).replace(",", "|") + ")", ref)
    return ref.replace(r"\*", "[^/]*")


def test_every_results_file_is_cited_and_every_citation_exists_and_stays_small() -> None:
    cited = set()
    for page in PAGES:
        cited |= set(re.findall(r"`(results/[\w./{},*-]+)`", page.read_text()))
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "results").rglob("*") if p.is_file())
    patterns = {ref: _pattern(ref) for ref in cited}
    for ref, pattern in patterns.items():
        assert any(re.fullmatch(pattern, f) for f in files), f"{ref} is cited but not in results/"
    for f in files:
        assert any(re.fullmatch(p, f) for p in patterns.values()), (
            f"{f}: no evaluation page cites it"
        )
        assert (ROOT / f).stat().st_size < 1 << 20, f"{f} is over 1 MB"
    docs = [p for p in (ROOT / "docs").rglob("*") if p.is_file()]
    total = sum((ROOT / f).stat().st_size for f in files) + sum(p.stat().st_size for p in docs)
    assert total < 3 << 20, f"docs/ and results/ hold {total:,} bytes"
