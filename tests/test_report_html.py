"""The simulator's HTML report: self-contained (tables and the PNGs inside), written by
``stoker sim firepool`` / ``stoker sim gfs`` and again by ``stoker report DIR``."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

from typer.testing import CliRunner

from stoker.cli.main import app
from stoker.sim.report_html import render
from test_sim_cli import SMALL


def _images(page: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([^"]+)"', page)]


def test_firepool_writes_a_self_contained_report_and_report_renders_it_again(
    tmp_path: Path,
) -> None:
    out = tmp_path / "fp"
    res = CliRunner().invoke(app, ["sim", "firepool", "--out", str(out), *SMALL, "--no-sweep"])
    assert res.exit_code == 0, res.output
    assert "report.html" in res.output
    page = (out / "report.html").read_text()
    pngs = sorted(out.glob("*.png"))
    assert len(pngs) == 2
    assert _images(page) == [p.read_bytes() for p in pngs]
    # nothing fetched from elsewhere: no links, scripts or stylesheets outside the file
    assert not re.search(r'(src|href)="(https?:)?//', page)
    results = json.loads((out / "results.json").read_text())
    speedup = results["agent_loop"]["speedup"]
    assert f"{speedup:,.4g}" in page and "agent loop" in page
    first = page
    (out / "report.html").unlink()
    res = CliRunner().invoke(app, ["report", str(out)])
    assert res.exit_code == 0, res.output
    assert (out / "report.html").read_text() == first


def test_report_of_a_directory_without_results_is_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert res.exit_code == 2
    assert "no results.json" in res.output and "Traceback" not in res.output


def test_tables_follow_the_results_shape(tmp_path: Path) -> None:
    doc = {
        "meta": {"trace": "v2026", "nodes": 3},
        "results": {
            "medium": {
                "gfs": {"spot.eviction_rate": 0.1, "hp.mean_queue_s": 12.5, "jobs": 1000},
                "yarn-cs": {"spot.eviction_rate": 0.4, "hp.mean_queue_s": 30.0, "jobs": 1000},
            }
        },
        "timeline": {"t": list(range(100)), "<script>": "x"},
    }
    (tmp_path / "results.json").write_text(json.dumps(doc))
    page = render(tmp_path).read_text()
    assert "stoker sim gfs: v2026 trace" in page
    # three metrics of two policies: the metrics run down the page, one column per policy
    grid = page[page.index("medium") :]
    head = re.search(r"<thead><tr>(.*?)</tr></thead>", grid).group(1)
    assert re.findall(r">([^<]+)</th>", head) == ["gfs", "yarn-cs"]
    assert "100 values, 0 .. 99" in page
    assert "<script>" not in page and "&lt;script&gt;" in page
