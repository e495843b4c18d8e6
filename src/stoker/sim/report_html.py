"""A self-contained HTML report of a simulator run: ``report.html`` beside ``results.json``.

One renderer for every experiment (``stoker sim firepool``, ``gfs``, ``shared``, and
``stoker report DIR`` to render again): it reads ``results.json`` and the PNG plots in the
directory, and writes one file with the tables and the plots embedded as base64, so the
report can be mailed or attached to a CI run as it is. The tables follow the results'
shape: a mapping of numbers is a two-column table; a mapping of mappings (per policy, per
load) is a grid, with the longer side down the page; lists of numbers are summarised.
"""

from __future__ import annotations

import base64
import datetime
import html
import json
from pathlib import Path
from typing import Any

_LIST_SHOWN = 12  # numbers of a list written out before it is summarised

_CSS = """
:root { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  color: #1b1f24; background: #f6f7f9; }
body { margin: 0; }
main { max-width: 1200px; margin: 0 auto; padding: 1.25rem; }
h1 { font-size: 1.4rem; margin: 0 0 .25rem; }
h2 {
  font-size: 1.1rem; margin: 2rem 0 .5rem;
  border-bottom: 1px solid #d0d7de; padding-bottom: .25rem; }
h3 { font-size: 1rem; margin: 1.25rem 0 .4rem; }
h4 { font-size: .9rem; margin: 1rem 0 .3rem; color: #57606a; }
.meta { color: #57606a; margin: 0 0 1rem; }
nav ul {
  display: flex; flex-wrap: wrap; gap: .3rem 1rem;
  padding: 0; list-style: none; margin: .5rem 0; }
.scroll {
  display: inline-block; max-width: 100%; overflow-x: auto;
  background: #fff; border: 1px solid #d0d7de; border-radius: 8px; }
table {
  border-collapse: collapse; font-size: .85rem;
  font-variant-numeric: tabular-nums; }
th, td {
  padding: .3rem .6rem; border-bottom: 1px solid #eaeef2;
  text-align: right; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; min-width: 14rem; }
thead th { background: #f6f8fa; color: #57606a; font-weight: 600; }
tbody th { font-weight: 500; }
td.text { text-align: left; white-space: normal; }
figure {
  margin: 1rem 0; background: #fff;
  border: 1px solid #d0d7de; border-radius: 8px; padding: .75rem; }
figure img { max-width: 100%; height: auto; display: block; margin: 0 auto; }
figcaption { font-size: .85rem; color: #57606a; text-align: center; margin-top: .4rem; }
@media print { .scroll { overflow: visible; } figure { break-inside: avoid; } }
"""


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if v != v:  # NaN
            return "–"
        if v == 0 or 1e-3 <= abs(v) < 1e6:
            return f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}"
        return f"{v:.3e}"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, list):
        if all(isinstance(x, int | float) and not isinstance(x, bool) for x in v):
            if len(v) <= _LIST_SHOWN:
                return ", ".join(_fmt(x) for x in v)
            nums = [float(x) for x in v]
            return f"{len(v):,} values, {_fmt(min(nums))} .. {_fmt(max(nums))}"
        return json.dumps(v)[:200]
    return str(v)


def _scalar(v: Any) -> bool:
    return not isinstance(v, dict) and not (isinstance(v, list) and v and isinstance(v[0], dict))


def _flat_mapping(v: Any) -> bool:
    return isinstance(v, dict) and bool(v) and all(_scalar(x) for x in v.values())


def _cell(v: Any, tag: str = "td") -> str:
    cls = ' class="text"' if isinstance(v, str) and len(v) > 24 else ""
    return f"<{tag}{cls}>{html.escape(_fmt(v))}</{tag}>"


def _table(head: list[str], rows: list[list[Any]]) -> str:
    thead = "".join(f'<th scope="col">{html.escape(h)}</th>' for h in head)
    body = "".join(
        "<tr>"
        + f'<th scope="row">{html.escape(str(r[0]))}</th>'
        + "".join(_cell(v) for v in r[1:])
        + "</tr>"
        for r in rows
    )
    table = f"<table><thead><tr>{thead}</tr></thead><tbody>{body}</tbody></table>"
    return f'<div class="scroll">{table}</div>'


def _grid(d: dict[str, dict[str, Any]]) -> str:
    """A mapping of flat mappings as one table, the longer side down the page."""
    outer = list(d)
    inner = list(dict.fromkeys(k for v in d.values() for k in v))
    if len(inner) > len(outer):  # e.g. many metrics of a few policies: metrics down
        return _table(["", *outer], [[k, *(d[o].get(k) for o in outer)] for k in inner])
    return _table(["", *inner], [[o, *(d[o].get(k) for k in inner)] for o in outer])


def _section(name: str, v: Any, depth: int) -> str:
    tag = f"h{min(depth, 4)}"
    anchor = f' id="{html.escape(name)}"' if depth == 2 else ""
    head = f"<{tag}{anchor}>{html.escape(name.replace('_', ' '))}</{tag}>"
    return head + _render(v, depth + 1)


def _render(v: Any, depth: int) -> str:
    if isinstance(v, dict):
        if v and all(_flat_mapping(x) for x in v.values()):
            return _grid(v)
        flat = [[k, x] for k, x in v.items() if _scalar(x)]
        out = _table(["", "value"], flat) if flat else ""
        for k, x in v.items():
            if not _scalar(x):
                out += _section(k, x, depth)
        return out
    if isinstance(v, list) and v and isinstance(v[0], dict):
        cols = list(dict.fromkeys(k for row in v for k in row))
        return _table(["#", *cols], [[i, *(row.get(c) for c in cols)] for i, row in enumerate(v)])
    return f"<p>{html.escape(_fmt(v))}</p>"


def _title(doc: dict[str, Any], out: Path) -> str:
    if "agent_loop" in doc:
        return "stoker sim firepool"
    if "partitioned" in doc and "shared" in doc:
        return "stoker sim shared: warm pools and hp/spot on one cluster"
    if "meta" in doc and "results" in doc:
        meta = doc["meta"]
        return f"stoker sim gfs: {meta.get('trace', '?')} trace"
    return f"stoker results: {out.name}"


def render(out: Path) -> Path:
    """Write ``out/report.html`` from ``out/results.json`` and the PNGs in ``out``."""
    results = out / "results.json"
    if not results.is_file():
        raise FileNotFoundError(f"{out}: no results.json (run stoker sim ... --out {out} first)")
    doc = json.loads(results.read_text())
    if not isinstance(doc, dict):
        raise ValueError(f"{results}: expected a JSON object")
    title = _title(doc, out)
    written = datetime.datetime.fromtimestamp(results.stat().st_mtime).isoformat(timespec="seconds")
    figures = []
    for png in sorted(out.glob("*.png")):
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        label = png.stem.replace("_", " ")
        figures.append(
            f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(label)}">'
            f"<figcaption>{html.escape(png.name)}</figcaption></figure>"
        )
    # the run's setup and figures first, then each experiment in the file's order
    order = sorted(doc, key=lambda k: (k not in ("meta", "seed"), k == "assumptions"))
    scalars = {k: doc[k] for k in order if _scalar(doc[k])}
    nav = "".join(
        f'<li><a href="#{html.escape(k)}">{html.escape(k.replace("_", " "))}</a></li>'
        for k in order
        if not _scalar(doc[k])
    )
    body = _table(["", "value"], [[k, v] for k, v in scalars.items()]) if scalars else ""
    if figures:
        nav = '<li><a href="#plots">plots</a></li>' + nav
        body += '<h2 id="plots">plots</h2>' + "".join(figures)
    for k in order:
        if not _scalar(doc[k]):
            body += _section(k, doc[k], 2)
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body><main>"
        f"<h1>{html.escape(title)}</h1>"
        f'<p class="meta">{html.escape(str(results))} · written {written}</p>'
        f'<nav aria-label="sections"><ul>{nav}</ul></nav>{body}</main></body></html>\n'
    )
    path = out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path
