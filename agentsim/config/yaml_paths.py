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
