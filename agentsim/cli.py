"""The ``agentsim`` command line: thin wrappers that parse, call the API and print.

Sub-commands live in :mod:`agentsim.commands` (one module each). Any
:class:`~agentsim.errors.InputError` becomes one line on stderr and exit code 2, without a
traceback.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings

import typer

from agentsim.commands import COMMAND_MODULES
from agentsim.errors import InputError, InvariantViolation

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _show_warning(message, category, filename, lineno, file=None, line=None, _default=warnings.showwarning):
    """``warnings.showwarning`` for the command line: a warning that agentsim itself raises (a
    spill file that cannot be written, say) is one ``warning:`` line on stderr, like the run's
    own warnings; a library's keeps Python's format, with its file and line, for its bug report."""
    if os.path.abspath(filename).startswith(_PACKAGE_DIR + os.sep):
        (file if file is not None else sys.stderr).write(f"warning: {message}\n")
        return
    _default(message, category, filename, lineno, file, line)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            installed = version("agentsim")
        except PackageNotFoundError:  # running from a source tree that was never installed
            installed = "unknown (not installed)"
        sys.stdout.write(f"agentsim {installed}\n")
        raise typer.Exit()


def build_app(command: str | None = None) -> typer.Typer:
    """The CLI with every sub-command, or with ``command`` alone.

    A process that runs one command imports that command's module only (``agentsim replay``
    does not pay for the simulator's, the plots' or rich's imports). The root callback keeps the
    app a group either way, so ``agentsim replay ...`` parses the same with one or all commands.
    """
    built = typer.Typer(
        name="agentsim",
        help="Simulate agentic LLM workloads against a tiered KV cache.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )

    @built.callback()
    def root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                          help="Print the installed agentsim version and exit.")) -> None:
        """Simulate agentic LLM workloads against a tiered KV cache."""

    for module_name in ([command] if command in COMMAND_MODULES else COMMAND_MODULES):
        try:
            module = importlib.import_module(f"agentsim.commands.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"agentsim.commands.{module_name}":
                continue  # command not built yet
            raise
        module.register(built)
    return built


def __getattr__(name: str):
    """``agentsim.cli.app``: the app with every command (built on first access, for tests and embedding)."""
    if name == "app":
        globals()["app"] = built = build_app()
        return built
    raise AttributeError(name)


def _command_named(args: list[str]) -> str | None:
    """The module of the sub-command ``args`` name, if the first argument is one (options come
    after it). A command spelt with hyphens lives in a module with underscores (check-timing)."""
    module = args[0].replace("-", "_") if args else None
    return module if module in COMMAND_MODULES else None


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
    """Console entry point.

    Typer runs in non-standalone mode so that its usage errors (an unknown option or command, a
    value of the wrong type, a missing argument) reach this function and leave as one
    ``error:`` line with exit code 2, like every other bad input, instead of a boxed panel.
    """
    with warnings.catch_warnings():   # restores the handler for a caller in the same process
        warnings.showwarning = _show_warning
        _main(list(sys.argv[1:] if argv is None else argv))


def _main(args: list[str]) -> None:
    app = build_app(_command_named(args))
    if not args:  # bare ``agentsim``: the help, exit code 2, as typer prints it
        app(args=args, standalone_mode=True)
    try:
        code = app(args=args, standalone_mode=False)
    except SystemExit as done:
        if done.code == INTERRUPTED_EXIT_CODE:
            exit_interrupted()
        raise
    except typer.TyperException as error:  # the base of typer's usage and parameter errors
        context = getattr(error, "ctx", None)
        hint = f" (see '{context.command_path} --help')" if context is not None else ""
        sys.stderr.write(f"error: {error.format_message()}{hint}\n")
        raise SystemExit(error.exit_code)
    except typer.Abort:  # end of input at a prompt
        sys.stderr.write("aborted\n")
        raise SystemExit(1)
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
    # In non-standalone mode a command's typer.Exit(code) (and Ctrl-C, which typer turns into
    # Exit(130)) comes back as the return value; a finished command returns None.
    if code == INTERRUPTED_EXIT_CODE:
        exit_interrupted()
    if isinstance(code, int) and not isinstance(code, bool) and code:
        raise SystemExit(code)


if __name__ == "__main__":  # pragma: no cover
    main()
