"""The site's reference pages, generated from the code at build time (mkdocs-gen-files runs
this script; nothing here is committed as Markdown, so the references cannot drift):

- reference/sdk.md: the SDK, by mkdocstrings from stoker.client's docstrings;
- reference/config.md: every key of the broker's TOML file, from its pydantic models;
- reference/cli.md: every command and option, from the typer app through click;
- reference/http-api.md: every path and method, from the broker app's OpenAPI document;
- reference/metrics.md: every metric, from a broker's prometheus registry.

A config key without a description fails the build (``ValueError`` naming the key).
"""

from __future__ import annotations

import asyncio
import html
import sys
import tempfile
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# document the tree being built, not whichever stoker the environment installed
_SRC = Path(__file__).resolve().parents[2] / "src"
sys.path.insert(0, str(_SRC))

import mkdocs_gen_files  # noqa: E402
import typer  # noqa: E402
from pydantic import BaseModel  # noqa: E402
from pydantic_core import PydanticUndefined  # noqa: E402

# a key's unit, by the suffix of its name (the project's naming rule: units in names)
_UNITS = {
    "_s": "seconds",
    "_h": "hours",
    "_days": "days",
    "_mb": "MiB",
    "_bytes": "bytes",
    "_gpus": "GPUs",
}

# the SDK's classes a reader looks for first; the rest of stoker.client.__all__ follows
_SDK_FIRST = ("Client", "AsyncClient", "Session", "AsyncSession", "Job", "AsyncJob")


def cell(text: object) -> str:
    """``text`` as one Markdown table cell: one line, no HTML, pipes escaped."""
    one_line = " ".join(str(text).split())
    return html.escape(one_line, quote=False).replace("|", "\\|")


def code(text: object) -> str:
    """``text`` as inline code in a table cell (empty stays empty)."""
    s = str(text)
    return f"<code>{cell(s)}</code>" if s else ""


def table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    """A Markdown table (rows already escaped)."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return [*lines, ""]


# -- the SDK ---------------------------------------------------------------------------


def sdk_names() -> tuple[list[str], list[str]]:
    """stoker.client's public names (its ``__all__``): the exceptions apart, base first."""
    import stoker.client as sdk

    def is_error(name: str) -> bool:
        obj = getattr(sdk, name)
        return isinstance(obj, type) and issubclass(obj, Exception)

    rest = [n for n in sdk.__all__ if n not in _SDK_FIRST and not is_error(n)]
    errors = sorted((n for n in sdk.__all__ if is_error(n)), key=lambda n: n != "StokerError")
    return [*_SDK_FIRST, *rest], errors


def sdk_page() -> str:
    """mkdocstrings renders each name from its docstrings."""
    names, errors = sdk_names()
    lines = [
        "# SDK reference",
        "",
        "`stoker.Client` and `stoker.AsyncClient` have the same methods; generated from the",
        "docstrings of `stoker.client`.",
        "",
    ]
    for name in names:
        lines += [f"::: stoker.client.{name}", ""]
    lines += ["## Exceptions", ""]
    for name in errors:
        lines += [f"::: stoker.client.{name}", "    options:", "      heading_level: 3", ""]
    return "\n".join(lines)


# -- the broker configuration ----------------------------------------------------------


def _type_name(ann: Any) -> str:
    """A field's annotation as a reader writes its TOML value."""
    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if origin is typing.Literal:
        return " | ".join(f'"{a}"' for a in args)
    if origin in (typing.Union, types.UnionType):  # None is the default's "unset"
        return " | ".join(_type_name(a) for a in args if a is not type(None))
    if origin is list:
        return f"list[{_type_name(args[0])}]"
    if origin is dict:
        return f"table of {_type_name(args[1])}s"
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return "table"
    return getattr(ann, "__name__", str(ann))


def _table_of(ann: Any) -> tuple[type[BaseModel], bool] | None:
    """The model a field holds as a table (and whether it is a table of them, by name)."""
    for arg in (ann, *typing.get_args(ann)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg, False
        if typing.get_origin(arg) is dict:
            value = typing.get_args(arg)[1]
            if isinstance(value, type) and issubclass(value, BaseModel):
                return value, True
    return None


def _unit(name: str) -> str:
    return next((u for suffix, u in _UNITS.items() if name.endswith(suffix)), "")


def _default(info: Any) -> str:
    if info.default_factory is not None:
        return repr(info.default_factory())
    if info.default is PydanticUndefined:
        return "required"
    if info.default is None:
        return "unset"
    if isinstance(info.default, BaseModel):
        return ""
    if isinstance(info.default, bool):
        return str(info.default).lower()
    if isinstance(info.default, str):
        return f'"{info.default}"'
    return repr(info.default)


def config_keys(
    model: type[BaseModel], prefix: str = ""
) -> Iterator[tuple[str, str, str, str, str]]:
    """Every key of ``model``'s tables, nested ones too: (dotted key, type, default, unit,
    description); a table by name is ``NAME`` in the key. ValueError for a key without a
    description."""
    for name, info in model.model_fields.items():
        key = f"{prefix}{name}"
        nested = _table_of(info.annotation)
        desc = info.description
        if not desc and nested is not None and nested[0].__doc__:
            desc = nested[0].__doc__.strip().splitlines()[0]
        if not desc:
            raise ValueError(f"{key}: a config key without a description (Field(description=))")
        yield key, _type_name(info.annotation), _default(info), _unit(name), desc
        if nested is not None:
            sub, by_name = nested
            yield from config_keys(sub, f"{key}.NAME." if by_name else f"{key}.")


def config_page() -> str:
    """The TOML file's keys as one table per top-level table."""
    from stoker.broker import config

    groups: dict[str, list[tuple[str, ...]]] = {}
    for key, typ, default, unit, desc in config_keys(config._BrokerFile):
        head = key.split(".")[0] if "." in key else ""
        groups.setdefault(head, []).append(
            (code(key), code(typ), code(default), cell(unit), cell(desc))
        )
    lines = [
        "# Broker configuration reference",
        "",
        "The broker reads one TOML file (`stoker up --config FILE`). Unknown keys are errors",
        "and nothing is coerced. `NAME` stands for a name you choose (a profile, a tenant).",
        "Generated from the pydantic models of `stoker.broker.config`.",
        "",
        "An example:",
        "",
        "```toml",
        _example(config.__doc__ or ""),
        "```",
        "",
    ]
    head = ("Key", "Type", "Default", "Unit", "Description")
    for group, rows in groups.items():
        lines += [f"## [{group}]" if group else "## Top-level keys", ""]
        lines += table(head, rows)
    return "\n".join(lines)


def _example(doc: str) -> str:
    """The commented example of the module docstring (its indented block after ``::``)."""
    block = doc.split("::", 1)[1] if "::" in doc else ""
    lines = [ln[4:] if ln.startswith("    ") else ln for ln in block.splitlines()]
    return "\n".join(lines).strip("\n")


# -- the CLI -----------------------------------------------------------------------------


# typer builds click commands (its own copy of click, so they are read by their attributes)


def cli_commands(cmd: Any, path: str = "stoker") -> Iterator[tuple[str, Any]]:
    """Every command of the typer app, groups too, by its full name (``stoker sim gfs``)."""
    yield path, cmd
    subs = getattr(cmd, "commands", {})
    for name in sorted(subs):
        yield from cli_commands(subs[name], f"{path} {name}")


def _param_row(p: Any) -> tuple[str, ...]:
    # typer resolves a click type lazily; the annotation it came from names it now
    typed = getattr(p, "type_descriptor", None)
    kind = _type_name(typed.annotation) if typed else ""
    if p.param_type_name == "argument":
        names, kind = (p.metavar or p.name.upper()), f"argument: {kind}"
    else:
        names = ", ".join([*p.opts, *p.secondary_opts])
        kind = "flag" if p.is_flag else kind
    default = "" if p.default is None or callable(p.default) else p.default
    if isinstance(default, (list, tuple)):
        default = " ".join(map(str, default))
    help_text = getattr(p, "help", None) or ""
    if p.required:
        help_text = f"(required) {help_text}"
    return code(names), cell(kind), code(default), cell(help_text)


def cli_page() -> str:
    """One section per command: its help and a table of its arguments and options."""
    from stoker.cli.main import app

    root = typer.main.get_command(app)
    lines = [
        "# CLI reference",
        "",
        "Every command of `stoker`, generated from its typer app (`stoker COMMAND --help`",
        "says the same).",
        "",
    ]
    for path, cmd in cli_commands(root):
        if cmd.hidden:
            continue
        lines += [f"## `{path}`", ""]
        if cmd.help:
            lines += [html.escape(cmd.help.split("\f")[0].strip(), quote=False), ""]
        params = [p for p in cmd.params if not getattr(p, "hidden", False)]
        if params:
            lines += table(("Name", "Type", "Default", "Help"), [_param_row(p) for p in params])
        if getattr(cmd, "commands", None):
            subs = ", ".join(f"`{path} {n}`" for n in sorted(cmd.commands))
            lines += [f"Commands: {subs}", ""]
    return "\n".join(lines)


# -- the HTTP API ------------------------------------------------------------------------


def broker_routes() -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The broker app's OpenAPI document, and its routes outside it (methods, path), from
    a broker built (never started) on a throwaway data dir: its routes need a broker's
    configuration, nothing of its work."""
    from stoker.broker.app import Broker
    from stoker.broker.config import BrokerConfig

    with tempfile.TemporaryDirectory() as data_dir:
        broker = Broker(BrokerConfig(data_dir=Path(data_dir)))
        try:
            doc = broker.app.openapi()
            hidden = [
                (", ".join(sorted(r.methods or ())), r.path)
                for r in broker.app.routes
                if not getattr(r, "include_in_schema", True)
            ]
        finally:
            asyncio.run(broker.close())
    return doc, hidden


def _schema_name(schema: dict[str, Any]) -> str:
    """A schema as a reader names it: its model's name, or its type."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(_schema_name(s) for s in schema["anyOf"])
    if schema.get("type") == "array":
        return f"array of {_schema_name(schema.get('items', {}))}"
    return str(schema.get("type", "any"))


def http_page() -> str:
    """Every operation (parameters, body, responses), then every schema's fields."""
    doc, hidden = broker_routes()
    lines = [
        "# HTTP API reference",
        "",
        "The broker's HTTP API, generated from its OpenAPI document (a running broker serves",
        "it at `/openapi.json`). Every call but the health checks needs",
        "`Authorization: Bearer TOKEN`; every error is an `ErrorBody` naming the field.",
        "",
    ]
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            lines += [f"## `{method.upper()} {path}`", ""]
            if op.get("summary"):
                lines += [f"**{html.escape(op['summary'], quote=False)}**", ""]
            if op.get("description"):
                lines += [html.escape(op["description"], quote=False), ""]
            params = [
                (
                    code(p["name"]),
                    cell(p["in"]),
                    cell("yes" if p.get("required") else "no"),
                    cell(_schema_name(p.get("schema", {}))),
                    cell(p.get("description", "")),
                )
                for p in op.get("parameters", [])
            ]
            if params:
                lines += table(("Parameter", "In", "Required", "Type", "Description"), params)
            for media, body in op.get("requestBody", {}).get("content", {}).items():
                lines += [f"Request body (`{media}`): {_schema_name(body.get('schema', {}))}", ""]
            responses = []
            for status, resp in op["responses"].items():
                schemas = [
                    _schema_name(c["schema"])
                    for c in resp.get("content", {}).values()
                    if c.get("schema")
                ]
                responses.append((code(status), cell(resp.get("description", "")), *schemas[:1]))
            lines += table(
                ("Status", "Description", "Body"),
                [(*r, "") if len(r) == 2 else r for r in responses],
            )
    lines += [
        "## Outside the OpenAPI document",
        "",
        "The metrics, the dashboard and the API's own documentation:",
        "",
        *table(("Method", "Path"), [(cell(m), code(p)) for m, p in hidden]),
        "## Schemas",
        "",
    ]
    for name, schema in doc.get("components", {}).get("schemas", {}).items():
        lines += [f"### {name}", ""]
        if schema.get("description"):
            lines += [html.escape(schema["description"], quote=False), ""]
        required = set(schema.get("required", ()))
        props = [
            (
                code(field),
                cell(_schema_name(s)),
                cell("yes" if field in required else "no"),
                cell(s.get("description", "")),
            )
            for field, s in schema.get("properties", {}).items()
        ]
        if props:
            lines += table(("Field", "Type", "Required", "Description"), props)
        elif "enum" in schema:
            lines += ["One of: " + ", ".join(f"`{v}`" for v in schema["enum"]), ""]
    return "\n".join(lines)


# -- the metrics -------------------------------------------------------------------------


def metric_rows() -> list[tuple[str, str, str, str]]:
    """Every metric of a broker's registry: (exposed name, type, labels, help)."""
    from prometheus_client.metrics import MetricWrapperBase

    from stoker.broker.metrics import BrokerGauges, BrokerMetrics

    metrics = BrokerMetrics()
    metrics.watch(BrokerGauges)  # the gauges' families, empty
    # counters and histograms keep their label names on the metric, gauge families on
    # themselves (the registry's collected families of counters carry only samples)
    wrapped = {
        m._name: m._labelnames for m in vars(metrics).values() if isinstance(m, MetricWrapperBase)
    }
    rows = []
    for fam in metrics.registry.collect():
        labels = wrapped.get(fam.name, getattr(fam, "_labelnames", ()))
        name = f"{fam.name}_total" if fam.type == "counter" else fam.name
        rows.append((name, fam.type, ", ".join(labels), fam.documentation))
    return rows


def metrics_page() -> str:
    """One table of every metric."""
    lines = [
        "# Metrics reference",
        "",
        "What a broker serves at `/metrics` (Prometheus text format), generated from its",
        "registry. A histogram also exposes `_bucket`, `_sum` and `_count`; labels are",
        "bounded (never a tenant, token or reuse tag).",
        "",
    ]
    rows = [(code(n), cell(t), code(labels), cell(h)) for n, t, labels, h in metric_rows()]
    lines += table(("Metric", "Type", "Labels", "Help"), rows)
    return "\n".join(lines)


# the pages (mkdocs.yml's nav names each)
_PAGES = {
    "sdk": sdk_page,
    "config": config_page,
    "cli": cli_page,
    "http-api": http_page,
    "metrics": metrics_page,
}

for _page, _render in _PAGES.items():
    with mkdocs_gen_files.open(f"reference/{_page}.md", "w") as _out:
        _out.write(_render())
