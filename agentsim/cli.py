"""The ``agentsim`` command line: thin wrappers that parse, call the API and print.

Sub-commands live in :mod:`agentsim.commands` (one module each). Any
:class:`~agentsim.errors.InputError` becomes one line on stderr and exit code 2, without a
traceback.
"""

from __future__ import annotations

import importlib
import os
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


#: Exit code of a command stopped by Ctrl-C (128 + SIGINT), as shells report it.
INTERRUPTED_EXIT_CODE = 130


def exit_interrupted() -> None:
    """Leave with exit code 130 after Ctrl-C, reliably.

    A plain ``SystemExit(130)`` is not enough: if the KeyboardInterrupt passed through C code
    that runs Python source (some extension modules do, while being imported), CPython marks
    it "unhandled" and, at the very end of interpreter shutdown, kills itself with SIGINT
    instead of returning 130, without printing anything. The work was already persisted by
    the commands' ``finally`` blocks, so the streams are flushed and the process leaves at once.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe must not turn Ctrl-C into a traceback
            pass
    os._exit(INTERRUPTED_EXIT_CODE)


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    try:
        app(args=argv, standalone_mode=True)
    except SystemExit as done:
        if done.code == INTERRUPTED_EXIT_CODE:  # typer turns KeyboardInterrupt into Exit(130)
            exit_interrupted()
        raise
    except InputError as error:
        fail(error)
    except InvariantViolation as error:
        # A bug in a policy or the engine (found by --check-invariants), not bad input: one line
        # naming the simulated time, instance and event, and its own exit code.
        sys.stderr.write(f"error: {error}\n")
        raise SystemExit(3)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        exit_interrupted()


if __name__ == "__main__":  # pragma: no cover
    main()
