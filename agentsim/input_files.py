"""Reading input files (scenarios, sweep files, fits) safely: regular files of bounded size only.

A scenario path may name anything: a named pipe (``open`` blocks until a writer comes, forever),
``/dev/zero`` (reads never end), a directory, a binary file or a multi-gigabyte log. Every input
file is therefore checked with ``os.stat`` before it is opened and read with a byte budget, so a
bad path is one :class:`~agentsim.errors.InputError` instead of a hang or an exhausted memory.

The budget, :data:`DEFAULT_MAX_INPUT_BYTES`, is far above any real scenario or fit file; raise
it on purpose with the environment variable ``AGENTSIM_MAX_INPUT_BYTES`` (a number of bytes).
Traces are streamed and have no budget, but they get the same special-file check
(:func:`require_regular_file`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from agentsim.errors import InputError

#: Largest YAML input (scenario, sweep file, fit file) read without being asked: 16 MiB.
DEFAULT_MAX_INPUT_BYTES = 16 * 2**20
MAX_INPUT_BYTES_ENV = "AGENTSIM_MAX_INPUT_BYTES"


def env_limit(name: str, default: int) -> int:
    """A positive integer limit from environment variable ``name`` (``default`` when unset).

    A malformed value is itself bad input (named after the variable), not a silent default."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(float(raw))
    except ValueError:
        raise InputError(f"expected a positive whole number, got {raw!r}", name) from None
    if value <= 0:
        raise InputError(f"expected a positive whole number, got {raw!r}", name)
    return value


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def require_regular_file(path: str | Path, what: str = "file") -> os.stat_result:
    """``os.stat(path)`` if ``path`` is a regular file (symlinks followed); else InputError.

    Checked before opening: opening a named pipe blocks and a device never ends."""
    source = str(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise InputError("file not found", source) from None
    except OSError as exc:
        raise InputError(f"cannot read {what} ({exc.strerror})", source) from None
    if not stat.S_ISREG(info.st_mode):
        kind = _kind(info.st_mode)
        raise InputError(f"is {kind}, expected a {what}" if kind.startswith("a ") else f"{kind}, expected a {what}", source)
    return info


def resolved_path(path: str | Path, what: str, source: str | None = None, location: str | None = None) -> Path:
    """``Path(path).resolve()``, or InputError (blamed on ``source`` and ``location``, else on the
    path) when it cannot be resolved: a symlink loop (RuntimeError from pathlib) or a name the
    filesystem refuses (``File name too long``)."""
    try:
        resolved = Path(path).resolve()
        resolved.exists()  # lstat: a too-long name fails here, not only when it is opened
    except RuntimeError:
        problem = "is a symbolic link loop"
    except OSError as exc:
        problem = f"cannot be looked up ({exc.strerror or exc.__class__.__name__})"
    else:
        return resolved
    if source is None:
        raise InputError(f"{what} path {problem}", str(path)) from None
    raise InputError(f"{what} {str(path)[:200]!r} {problem}", source, location) from None


def read_input_text(path: str | Path, what: str = "YAML file") -> str:
    """The UTF-8 text of a regular file no larger than the input budget (InputError otherwise).

    Reads at most budget + 1 bytes, so a file that grows while being read cannot exceed it.
    A NUL byte marks a binary file and is named with its line."""
    source = str(path)
    limit = env_limit(MAX_INPUT_BYTES_ENV, DEFAULT_MAX_INPUT_BYTES)
    info = require_regular_file(path, what)
    if info.st_size > limit:
        raise InputError(f"{what} is {info.st_size:,} bytes, above the {limit:,}-byte input limit "
                         f"(raise it with {MAX_INPUT_BYTES_ENV}=BYTES if this is intended)", source)
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise InputError(f"cannot read file ({exc.__class__.__name__}: {exc})", source) from None
    if len(data) > limit:
        raise InputError(f"{what} is above the {limit:,}-byte input limit "
                         f"(raise it with {MAX_INPUT_BYTES_ENV}=BYTES if this is intended)", source)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"cannot read file (UnicodeDecodeError: {exc})", source) from None
    nul = text.find("\x00")
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        raise InputError(f"NUL byte in a text file (binary data?); expected a {what}", source, f"line {line}")
    return text
