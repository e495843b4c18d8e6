"""``stoker tenant create|list|delete | logs | cancel | profiles``: managing tenants and
jobs from the command line. Job ids may be given shortened, as ``stoker ps`` prints them."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from stoker.cli.broker import JsonOpt, TokenFileOpt, TokenOpt, UrlOpt, _call, _client, _fail, _table
from stoker.cli.ids import resolve

tenant_app = typer.Typer(
    help="Tenants (admin token): create, list, delete, rotate.", no_args_is_help=True
)


@tenant_app.command("create")
def tenant_create(
    name: str, url: UrlOpt = None, token: TokenOpt = None, token_file: TokenFileOpt = None
) -> None:
    """Add a tenant and print its token (shown this once; the broker keeps only a hash)."""
    typer.echo(_call(url, token, token_file, lambda c: c.create_tenant(name)))


@tenant_app.command("list")
def tenant_list(
    url: UrlOpt = None,
    token: TokenOpt = None,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The tenants' names."""
    names = _call(url, token, token_file, lambda c: c.tenants())
    typer.echo(json.dumps(names) if as_json else "\n".join(names))


@tenant_app.command("delete")
def tenant_delete(
    name: str,
    purge: Annotated[bool, typer.Option(help="remove its job history too")] = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Revoke a tenant: its tokens stop working at once, its secrets and code go, its queued
    and running jobs are cancelled; its job history is kept or removed as the broker's
    tenant_history says (--purge: removed)."""
    done = _call(url, token, token_file, lambda c: c.delete_tenant(name, purge))
    typer.echo(
        f"tenant {name} revoked: {done['cancelled']} jobs cancelled, history {done['history']}"
        + (f" ({done['jobs_deleted']} jobs)" if done["history"] == "deleted" else "")
    )


@tenant_app.command("rotate")
def tenant_rotate(
    name: str,
    grace: Annotated[float, typer.Option(help="seconds the previous token keeps working")] = 300.0,
    url: UrlOpt = None,
    token: TokenOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Give a tenant a new token (printed); its previous one works --grace seconds more, so
    its callers switch without downtime."""
    typer.echo(_call(url, token, token_file, lambda c: c.rotate_token(name, grace))["token"])


def logs(
    job_id: Annotated[str, typer.Argument(help="job id (or the short id ps prints)")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="until the job ends")] = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Print a job's output (stdout and stderr, in order); ``-f`` follows it live."""
    from stoker.client import Job, StokerError

    try:
        with _client(url, token, token_file) as c:
            job = Job(c, c.get(resolve(c, job_id)))
            for stream, data in job.stream(follow=follow):
                out = sys.stdout if stream == "stdout" else sys.stderr
                out.buffer.write(data)
                out.flush()
    except StokerError as exc:
        _fail(str(exc))


def cancel(
    job_id: Annotated[str, typer.Argument(help="job id (or the short id ps prints)")],
    url: UrlOpt = None,
    token: TokenOpt = None,
    token_file: TokenFileOpt = None,
) -> None:
    """Cancel a job (it ends with failure ``cancelled``; a finished job stays as it was)."""
    from stoker.client import Job, StokerError

    try:
        with _client(url, token, token_file) as c:
            job = Job(c, c.get(resolve(c, job_id)))
            job.cancel()
            row = job.wait(30)  # the cancel lands once its pod has stopped the job
    except StokerError as exc:
        _fail(str(exc))
    typer.echo(f"{row['id']} {row['state']} {row['failure'] or ''}".rstrip())


def profiles(
    url: UrlOpt = None,
    token: TokenOpt = None,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The broker's profiles: GPUs per pod (0: CPU-only), warm and standby shares, preloads,
    the spare pods kept ready (min warm), queue."""
    items = _call(url, token, token_file, lambda c: c.profiles())
    if as_json:
        typer.echo(json.dumps(items))
        return
    rows = [
        [
            p["name"],
            p["gpus"],
            f"{p['share']:g}",
            f"{p['standby_share']:g}",
            ",".join(p["preload"]) or "-",
            "yes" if p["network"] else "no",
            p.get("min_warm", 0),
            p["queued"],
        ]
        for p in items
    ]
    columns = ["profile", "gpus", "share", "standby", "preload", "network", "min warm", "queued"]
    _table("profiles", columns, rows)


def register(app: typer.Typer, sim_app: typer.Typer) -> None:
    """Add the tenant and job commands to the ``stoker`` command."""
    app.add_typer(tenant_app, name="tenant")
    app.command()(logs)
    app.command()(cancel)
    app.command()(profiles)
