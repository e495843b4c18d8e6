"""``stoker deploy render``: the Kubernetes manifests for a configuration.

Without ``--out`` the manifests are one YAML stream on stdout (``| kubectl apply -f -``);
with ``--out DIR`` the whole Kustomize tree (the same as ``deploy/kubernetes/`` for the
default configuration) is written there, for ``kubectl apply -k DIR``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

deploy_app = typer.Typer(help="Deploy stoker on Kubernetes.", no_args_is_help=True)


@deploy_app.command("render")
def render(
    config: Annotated[
        Path | None, typer.Option(help="deployment TOML (replicas, broker_config, [kubernetes])")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="write the Kustomize tree into DIR")] = None,
) -> None:
    """Write the manifests: namespace, broker, RBAC, config, policies, PriorityClasses."""
    try:
        from stoker.runtime.kubernetes.deploy import DeployConfig, dump, kustomize_tree, manifests
    except ImportError as exc:  # pyyaml comes with the kubernetes extra
        typer.echo(f"stoker: {exc}; install stoker[kubernetes]", err=True)
        raise typer.Exit(2) from exc
    try:
        cfg = DeployConfig.load(config) if config else DeployConfig()
    except ValueError as exc:
        typer.echo(f"stoker: {exc}", err=True)
        raise typer.Exit(2) from exc
    if out is None:
        typer.echo(dump(manifests(cfg)), nl=False)
        return
    for rel, text in kustomize_tree(cfg).items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    typer.echo(
        f"wrote {len(kustomize_tree(cfg))} files to {out} (kubectl apply -k {out})", err=True
    )


def register(app: typer.Typer, sim_app: typer.Typer) -> None:
    app.add_typer(deploy_app, name="deploy")
