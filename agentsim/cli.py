"""The ``agentsim`` command line: thin wrappers that parse, call the API and print.

Sub-commands live in :mod:`agentsim.commands` (one module each). Any
:class:`~agentsim.errors.InputError` becomes one line on stderr and exit code 2, without a
traceback.
"""

from __future__ import annotations

import importlib
import sys

import typer

from agentsim.commands import COMMAND_MODULES
from agentsim.errors import InputError, InvariantViolation

app = typer.Typer(
    name="agentsim",
    help="Simulate agentic LLM workloads against a tiered KV cache.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for _module_name in COMMAND_MODULES:
    try:
        _module = importlib.import_module(f"agentsim.commands.{_module_name}")
    except ModuleNotFoundError as _exc:
        if _exc.name == f"agentsim.commands.{_module_name}":
            continue  # command not built yet
        raise
    _module.register(app)


def fail(error: InputError) -> None:
    """Print an input error as one line and exit 2."""
    sys.stderr.write(f"error: {error.render()}\n")
    raise SystemExit(2)


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    try:
        app(args=argv, standalone_mode=True)
    except InputError as error:
        fail(error)
    except InvariantViolation as error:
        # A bug in a policy or the engine (found by --check-invariants), not bad input: one line
        # naming the simulated time, instance and event, and its own exit code.
        sys.stderr.write(f"error: {error}\n")
        raise SystemExit(3)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
