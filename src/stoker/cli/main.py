"""The ``stoker`` command. Each command group lives in its own module and registers itself
here; heavy imports happen inside the commands so ``stoker --help`` stays fast."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="stoker",
    help="Broker GPU capacity: warm pools for agent and RL loops, guaranteed and spot work.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
sim_app = typer.Typer(help="Run the discrete-event simulator's experiments.", no_args_is_help=True)
app.add_typer(sim_app, name="sim")

# modules that add commands: each has ``register(app, sim_app)``
_COMMAND_MODULES = (
    "stoker.cli.sim_firepool",
    "stoker.cli.sim_gfs",
    "stoker.cli.sim_shared",
    "stoker.cli.sim_fairness",
    "stoker.cli.forecast",
    "stoker.cli.traces",
    "stoker.cli.broker",
    "stoker.cli.jobs",
    "stoker.cli.files",
    "stoker.cli.report",
    "stoker.cli.deploy",
    "stoker.cli.mcp_server",
)

for _name in _COMMAND_MODULES:
    importlib.import_module(_name).register(app, sim_app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
