"""``agentsim fit TRACE... --out FITS.yaml``: fit gap, service-time and length distributions.

TRACE may be a file, a directory (its ``*.json[l][.gz]`` files) or a glob. All traces must have
one format (WEKA/AgentX sessions, Mooncake or Bailian JSONL). Progress goes to stderr, a summary
table to stdout; the file layout is documented in :mod:`agentsim.workload.fitting.report` and
the methods in ``docs/fitting.md``.
"""

from __future__ import annotations

import glob
import shlex
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import typer

from agentsim.errors import InputError

TRACE_SUFFIXES = (".json", ".json.gz", ".jsonl", ".jsonl.gz")


def expand_traces(traces: list[str]) -> list[Path]:
    """Files named by ``traces`` (files, directories, globs), in argument order then name order.

    Raises InputError for a missing path, a glob without matches or a directory without traces.
    """
    files: list[Path] = []
    for arg in traces:
        path = Path(arg)
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
            if not found:
                raise InputError(f"directory holds no trace files ({', '.join('*' + s for s in TRACE_SUFFIXES)})", arg)
            files.extend(found)
        elif path.is_file():
            files.append(path)
        elif glob.has_magic(arg):
            found = sorted(Path(p) for p in glob.glob(arg) if Path(p).is_file())
            if not found:
                raise InputError("no file matches this pattern", arg)
            files.extend(found)
        else:
            raise InputError("trace file not found", arg)
    unique: dict[Path, None] = {}
    for file in files:
        unique.setdefault(file, None)
    return list(unique)


def _detect(files: list[Path], fmt: str) -> str:
    from agentsim.workload.traces import detect_format, resolve_format

    if fmt != "auto":
        return resolve_format(files[0], fmt)
    first = _read_guard(files[0], detect_format)
    for file in files[1:]:
        other = _read_guard(file, detect_format)
        if other != first:
            raise InputError(f"format {other!r} differs from {first!r} of {str(files[0])!r}; fit one format at a time",
                             str(file))
    return first


def _read_guard(file: Path, fn, *args):
    """Run ``fn(file, *args)`` turning I/O and decoding failures into InputError naming the file."""
    import gzip
    import zlib

    try:
        return fn(file, *args)
    except InputError:
        raise
    except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile, zlib.error) as exc:
        raise InputError(f"cannot read trace ({exc.__class__.__name__}: {exc})", str(file)) from None


def run_fit(traces: list[str], out: Path, fmt: str = "auto", seed: int = 0, criterion: str = "bic",
            progress=None, max_components: int = 3) -> dict:
    """Extract, fit and write ``out``; returns the document. ``progress(message)`` gets status lines."""
    import yaml

    from agentsim.workload.fitting.quantities import jsonl_quantities, weka_quantities
    from agentsim.workload.fitting.report import fit_document
    from agentsim.workload.fitting.select import CRITERIA, candidate_names

    if not traces:
        raise InputError("give at least one trace file, directory or glob", "command line")
    if criterion not in CRITERIA:
        raise InputError(f"unknown criterion {criterion!r}; use one of {', '.join(CRITERIA)}", "--criterion")
    if not 1 <= max_components <= 5:
        raise InputError(f"--max-components must be between 1 and 5, got {max_components}", "--max-components")
    say = progress or (lambda message: None)
    files = expand_traces(traces)
    requested_format = fmt
    fmt = _detect(files, fmt)
    say(f"reading {len(files)} {fmt} trace file(s)")
    started = time.perf_counter()

    def read_progress(number, total, file):
        if number == total or number % 20 == 0:
            say(f"  read {number}/{total} files")

    def extract():
        if fmt == "weka":
            return weka_quantities(files, read_progress)
        return jsonl_quantities(fmt, files, seed, read_progress)

    quantities = _read_guard(files[0], lambda _f: extract())
    command = " ".join(["agentsim", "fit", *map(shlex.quote, traces), "--out", shlex.quote(str(out))]
                       + ([] if requested_format == "auto" else [f"--format {fmt}"])
                       + ([f"--seed {seed}"] if seed else []) + ([f"--criterion {criterion}"] if criterion != "bic" else [])
                       + ([f"--max-components {max_components}"] if max_components != 3 else []))
    provenance = {
        "sources": [str(f) for f in files],
        "files": len(files),
        "format": fmt,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "seed": seed,
        "criterion": criterion,
        "max_components": max_components,
        "agentsim_version": _version(),
    }

    def fit_progress(name, fit):
        if fit is None:
            say(f"  {name}: no observations, skipped")
        elif isinstance(fit, str):
            say(f"  {name}: {fit}")
        else:
            say(f"  {name}: n={fit.n} -> {fit.chosen.family}")

    say("fitting")
    document = fit_document(quantities, provenance=provenance, seed=seed, criterion=criterion,
                            candidates=candidate_names(max_components), progress=fit_progress)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create the output directory ({exc.strerror})", str(out), "--out") from None
    header = ("# Distributions fitted by `agentsim fit` (see docs/fitting.md). Reference one from a scenario as\n"
              f"# {{fit: {out.name}#QUANTITY}}. Regenerate with: {command}\n")
    text = header + yaml.dump(document, Dumper=_plain_dumper(), sort_keys=False, width=120, allow_unicode=True)
    try:
        out.write_text(text)
    except OSError as exc:
        raise InputError(f"cannot write the fits file ({exc.strerror})", str(out), "--out") from None
    say(f"wrote {out} in {time.perf_counter() - started:.1f} s")
    return document


def _plain_dumper():
    import yaml

    class PlainDumper(yaml.SafeDumper):
        """Safe YAML without anchors/aliases (repeated lists are written out: easier to read and edit)."""

        def ignore_aliases(self, data):  # noqa: D401 - yaml API
            return True

    return PlainDumper


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("agentsim")
    except Exception:  # noqa: BLE001 - not installed (running from a checkout)
        return "unknown"


def register(app: typer.Typer) -> None:
    @app.command("fit")
    def fit_command(
        traces: Optional[list[str]] = typer.Argument(None, help="trace files, directories or globs"),
        out: Path = typer.Option(..., "--out", "-o", help="the FITS.yaml file to write"),
        fmt: str = typer.Option("auto", "--format", help="auto|weka|mooncake|bailian"),
        seed: int = typer.Option(0, "--seed", min=0, help="seed of the mixture starts and the KS/AD jitter"),
        criterion: str = typer.Option("bic", "--criterion", help="model selection: bic or aic"),
        max_components: int = typer.Option(3, "--max-components",
                                           help="largest lognormal mixture tried (2-3 by default; 1 = none)"),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress on stderr"),
    ) -> None:
        """Fit gap, service-time, token and count distributions to traces and write FITS.yaml."""
        from agentsim.commands.common import console as shared_console, err_console

        console = shared_console

        progress = None if quiet else (lambda message: err_console.print(message, markup=False, highlight=False))
        document = run_fit(list(traces or []), out, fmt, seed, criterion, progress, max_components)
        from rich.console import Console
        from rich.table import Table

        if not console.is_terminal:
            console = Console(width=140)  # a pipe or file gets the whole table, not an 80-column squeeze
        table = Table(title=f"fits ({out})", header_style="bold")
        for column in ("quantity", "n", "family", "p50", "p90", "p99", "emp p50", "emp p90", "emp p99", "KS"):
            table.add_column(column, justify="left" if column in ("quantity", "family") else "right")
        for name, entry in document["quantities"].items():
            fitted, empirical = entry.get("quantiles", {}), entry.get("empirical_quantiles", {})
            ks = entry.get("scores", {}).get("ks")
            table.add_row(name, str(entry["n"]), entry["family"],
                          *(f"{fitted.get(k, float('nan')):.4g}" for k in ("p50", "p90", "p99")),
                          *(f"{empirical.get(k, float('nan')):.4g}" for k in ("p50", "p90", "p99")),
                          "-" if ks is None else f"{ks:.3f}")
        console.print(table)
