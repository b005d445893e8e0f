"""YAML paths in error messages: ``a.b[0].c`` and the line a path was written on."""

from __future__ import annotations

#: A path into a parsed YAML document: mapping keys and list indices.
Path_ = tuple[str | int, ...]


def format_path(path: Path_) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def locate(lines: dict[Path_, int], path: Path_) -> str:
    """``line N: a.b[0].c`` for a YAML path: the line of the path or of its nearest ancestor in
    ``lines`` (a key written by a ``--set`` or a default has none), or the bare path if no
    ancestor has a line. The one place error messages find a YAML line."""
    probe = tuple(path)
    while probe and probe not in lines:
        probe = probe[:-1]
    text = format_path(tuple(path))
    return f"line {lines[probe]}: {text}" if probe else text


class LineMap(dict):
    """Path -> line of a parsed file, plus the paths whose value came from elsewhere: ``--set``
    (path -> the ``PATH=VALUE`` text; a value given on the command line has no line in the file,
    and an error in it is blamed on the option) or another file (path -> (that file, its line):
    a sweep file's ``set:`` or axis value). See :func:`override_at` and :func:`blame`."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.overrides: dict[Path_, str | tuple[str, int | None]] = {}


def override_at(lines: dict, path: Path_) -> str | tuple[str, int | None] | None:
    """What replaced ``path`` or one of its ancestors (a ``--set PATH=VALUE`` text or a
    (file, line) pair), or None."""
    overrides = getattr(lines, "overrides", None)
    if not overrides:
        return None
    probe = tuple(path)
    while probe:
        if probe in overrides:
            return overrides[probe]
        probe = probe[:-1]
    return None


def blame(lines: dict, source: str, path: Path_) -> tuple[str, str]:
    """(source, location) for an error at ``path``: the file and ``line N: path``, or, for a
    value a ``--set`` gave, that option and the path."""
    given = override_at(lines, path)
    if isinstance(given, tuple):  # a value another file gave (a sweep's set: or axis)
        source_file, line = given
        return source_file, (f"line {line}: " if line else "") + format_path(tuple(path))
    if given is not None:
        return f"--set {given}", format_path(tuple(path))
    return source, locate(lines, path)
