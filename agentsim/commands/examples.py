"""``agentsim examples [--copy DIR]``: list the shipped scenarios, sweeps, fits and notebooks, or
copy them to DIR to run and edit them outside the checkout."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from agentsim.commands.common import console


def register(app: typer.Typer) -> None:
    @app.command("examples")
    def examples_command(
        copy: Optional[Path] = typer.Option(None, "--copy", help="copy every example to DIR (same layout: DIR/scenarios, DIR/fits, ...)"),
        force: bool = typer.Option(False, "--force", help="with --copy: overwrite files that exist"),
    ) -> None:
        """List the example scenarios, sweeps, fits and notebooks; --copy DIR copies them out."""
        from rich.table import Table
        from rich.text import Text

        from agentsim.errors import InputError
        from agentsim.examples import copy_examples, describe, example_files, examples_root

        root = examples_root()
        if copy is not None:
            if copy.exists() and not copy.is_dir():
                raise InputError(f"{copy} exists and is not a directory", "--copy")
            try:
                written = copy_examples(copy, overwrite=force)
            except FileExistsError as exc:
                raise InputError(f"{exc} exists already (nothing copied; --force overwrites)", "--copy") from None
            except OSError as exc:  # a directory that cannot be created, a full disk
                raise InputError(f"cannot copy the examples there ({exc.strerror or exc})", str(copy)) from None
            console.print(f"copied {len(written)} examples to {copy}/; try: agentsim run {copy}/scenarios/coding-agents.yaml")
            return
        table = Table(title=f"examples in {root}", header_style="bold")
        table.add_column("file", overflow="fold", no_wrap=True)
        table.add_column("what it is", overflow="fold")
        for path in example_files():
            table.add_row(Text(str(path.relative_to(root))), Text(describe(path)))
        console.print(table)
        console.print("copy them with: agentsim examples --copy DIR")
