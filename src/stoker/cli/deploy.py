"""``stoker deploy render``: the Kubernetes manifests for a configuration.

With ``--out DIR`` the whole Kustomize tree (the same as ``deploy/kubernetes/`` for the
default configuration) is written there, with the keys Secret's files made in
``DIR/base/keys`` where missing, for ``kubectl apply -k DIR/overlays/postgres``. Without
``--out`` the manifests of that overlay are one YAML stream on stdout, all but the keys
Secret.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

deploy_app = typer.Typer(help="Deploy stoker on Kubernetes.", no_args_is_help=True)


@deploy_app.command("render")
def render(
    config: Annotated[
        Path | None,
        typer.Option(help="deployment TOML: replicas, broker_config, database_url, kubernetes"),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="write the Kustomize tree into DIR")] = None,
) -> None:
    """Write the manifests: namespace, broker, RBAC, config, policies, PriorityClasses."""
    try:
        from stoker.runtime.kubernetes.deploy import (
            BASE_DIR,
            KEYS_SECRET,
            POSTGRES_OVERLAY,
            DeployConfig,
            dump,
            manifests,
            write_tree,
        )
    except ImportError as exc:  # pyyaml comes with the kubernetes extra
        typer.echo(
            f"stoker: deploy render needs the kubernetes extra ({exc}):"
            " pip install 'stoker[kubernetes]'",
            err=True,
        )
        raise typer.Exit(2) from exc
    try:
        cfg = DeployConfig.load(config) if config else DeployConfig()
    except ValueError as exc:
        typer.echo(f"stoker: {exc}", err=True)
        raise typer.Exit(2) from exc
    ns = cfg.settings.namespace
    if out is None:
        typer.echo(dump(manifests(cfg)), nl=False)
        typer.echo(
            f"stoker: Secret {KEYS_SECRET} is not in the stream (re-applied, it would change"
            f" the keys): make it once with stoker deploy render --out DIR, or"
            f" kubectl -n {ns} create secret generic {KEYS_SECRET} --from-file=DIR/base/keys",
            err=True,
        )
        return
    made = write_tree(cfg, out)
    keys = f"made {', '.join(made)}" if made else "kept"
    typer.echo(
        f"wrote {out} (keys in {out / BASE_DIR / 'keys'}: {keys}; keep them secret)\n"
        f"apply: kubectl apply -k {out / POSTGRES_OVERLAY}"
        f"   (one broker on SQLite, no PostgreSQL: kubectl apply -k {out / BASE_DIR})",
        err=True,
    )


def register(app: typer.Typer, sim_app: typer.Typer) -> None:
    app.add_typer(deploy_app, name="deploy")
