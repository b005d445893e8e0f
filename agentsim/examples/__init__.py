"""The example scenarios, sweeps, fits and notebooks, wherever agentsim is installed.

In a checkout they are the repository's ``scenarios/``, ``sweeps/``, ``fits/`` and
``notebooks/``; a wheel carries copies of them in this package (``setup.py`` copies them in at
build time, so the repository keeps one copy and its paths). :func:`examples_root` finds
whichever is there; ``agentsim examples --copy DIR`` copies them out with the same layout, so
a scenario's ``fit: ../fits/...`` and a notebook's ``../scenarios/...`` keep working.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

#: The example directories, in the order they are listed.
EXAMPLE_DIRS = ("scenarios", "sweeps", "fits", "notebooks")
#: File patterns that are examples (anything else in those directories, e.g. caches, is not).
EXAMPLE_PATTERNS = ("*.yaml", "*.ipynb")

_PACKAGED = Path(__file__).resolve().parent
_CHECKOUT = _PACKAGED.parents[1]


def examples_root() -> Path:
    """The directory holding ``scenarios/``, ``sweeps/``, ``fits/`` and ``notebooks/``: this
    package in an installed wheel, the repository root in a checkout (or an editable install)."""
    if (_PACKAGED / "scenarios").is_dir():
        return _PACKAGED
    if (_CHECKOUT / "scenarios").is_dir() and (_CHECKOUT / "pyproject.toml").is_file():
        return _CHECKOUT
    raise FileNotFoundError(f"no example scenarios in {_PACKAGED} nor {_CHECKOUT} (a broken installation)")


def example_path(relative: str) -> Path:
    """An example file by its path under the examples root, e.g. ``scenarios/coding-agents.yaml``."""
    path = examples_root() / relative
    if not path.exists():
        known = ", ".join(str(p.relative_to(examples_root())) for p in example_files())
        raise FileNotFoundError(f"no example {relative!r}; examples: {known}")
    return path


def packaged_fits_dir() -> Path | None:
    """Where the shipped fits live (the fallback for a ``fit:`` path not found next to a scenario)."""
    try:
        return examples_root() / "fits"
    except FileNotFoundError:
        return None


def example_files() -> list[Path]:
    """Every example file, by directory then name."""
    root = examples_root()
    files = []
    for name in EXAMPLE_DIRS:
        for pattern in EXAMPLE_PATTERNS:
            files.extend(sorted((root / name).glob(pattern)))
    return files


def describe(path: Path) -> str:
    """One line saying what an example is: a notebook's title, a YAML file's first comment line
    (or its ``name:``)."""
    if path.suffix == ".ipynb":
        try:
            cells = json.loads(path.read_text()).get("cells", [])
        except (OSError, ValueError):
            return ""
        for cell in cells:
            if cell.get("cell_type") == "markdown":
                text = "".join(cell.get("source", [])).strip()
                return text.splitlines()[0].lstrip("# ").strip() if text else ""
        return ""
    comment = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line.startswith("#"):
            comment.append(line.lstrip("# ").strip())
        elif comment or line:
            break
    text = " ".join(comment)
    end = text.find(". ")
    return text[:end + 1] if end >= 0 else text


def copy_examples(destination: Path, overwrite: bool = False) -> list[Path]:
    """Copy every example to ``destination`` with the same layout; return the files written.

    Raises FileExistsError naming the first file that exists already unless ``overwrite``
    (checked before anything is written, so a refused copy writes nothing)."""
    root = examples_root()
    files = example_files()
    targets = [destination / path.relative_to(root) for path in files]
    if not overwrite:
        for target in targets:
            if target.exists():
                raise FileExistsError(str(target))
    for source, target in zip(files, targets):
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    return targets


__all__ = ["EXAMPLE_DIRS", "copy_examples", "describe", "example_files", "example_path", "examples_root",
           "packaged_fits_dir"]
