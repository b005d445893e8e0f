"""CLI sub-commands, one module each. Every module defines ``register(app: typer.Typer)``.

:mod:`agentsim.cli` imports every module listed in :data:`COMMAND_MODULES` (in this order, which
is the order ``agentsim --help`` shows) and calls its ``register``. Commands raise
:class:`agentsim.errors.InputError` for bad input; the CLI prints it and exits with code 2.
"""

COMMAND_MODULES = [
    "run", "validate", "schema", "policies",
    "replay", "mrc", "fit", "graph", "sweep", "plan", "report", "check_timing", "examples",
]
