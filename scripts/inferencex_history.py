"""Every version of InferenceX's ``nvidia-master.yaml``, read from a clone: shared by the scripts
that extract its disaggregated and single-node benchmark entries into ``agentsim/data``."""

from __future__ import annotations

import csv
import subprocess
from pathlib import Path
from typing import Callable, Iterable

import yaml

CONFIG = ".github/configs/nvidia-master.yaml"


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True, text=True).stdout


def write_entries(repo: str, until: str, rows_of: Callable[[str, str, str], Iterable[dict]], columns: list[str],
                  out: Path, header: str) -> int:
    """Run ``rows_of(commit, date, text)`` over every version of the file up to ``until``
    (oldest first) and write each distinct row once, from the first version that has it (rows
    are compared on every column but ``commit`` and ``date``), under the ``#`` comment lines of
    ``header``. Versions that cannot be read or parsed are skipped. Returns the versions read."""
    log = git(repo, "log", "--format=%H %ad", "--date=short", "--", CONFIG).split("\n")
    versions = [line.split() for line in log if line.strip() and line.split()[1] <= until]
    seen, rows = set(), []
    for commit, date in reversed(versions):
        try:
            found = list(rows_of(commit[:12], date, git(repo, "show", f"{commit}:{CONFIG}")))
        except (subprocess.CalledProcessError, yaml.YAMLError):
            continue
        for row in found:
            key = tuple(row[c] for c in columns[2:])
            if key not in seen:
                seen.add(key)
                rows.append(row)
    with out.open("w", newline="") as handle:
        handle.write("".join(f"# {line}\n" for line in header.splitlines()))
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} rows from {len(versions)} versions -> {out}")
    return len(versions)
