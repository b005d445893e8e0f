"""Resolution steps run on the raw scenario mapping before validation.

* :func:`resolve_profiles`: ``hardware.profile`` / ``model.profile`` name an entry in a catalogue
  (the composition root passes :func:`agentsim.hardware.profiles.load_catalogue`, the packaged
  ``agentsim/profiles/*.yaml``); its fields fill every key the scenario leaves out.
* :func:`resolve_fit_references`: ``{fit: FILE.yaml#quantity}`` becomes the fitted distribution
  spec stored in FILE (written by ``agentsim fit``), resolved relative to the scenario file, then
  among the packaged fits the caller names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import yaml

from agentsim.yaml_text import load_document
from agentsim.config.yaml_paths import locate
from agentsim.errors import InputError, did_you_mean
from agentsim.input_files import read_input_text, resolved_path

_SECTIONS = {"hardware": "hardware", "model": "models"}


def resolve_profiles(data: dict, source: str, lines: dict, load_catalogue: Callable[[str], dict[str, dict]]) -> dict:
    """Fill ``hardware`` and ``model`` from the profile each names; ``load_catalogue(name)`` returns
    {profile name: fields} for ``hardware`` or ``models`` (given, so ``config/`` needs no catalogue)."""
    for section, catalogue_name in _SECTIONS.items():
        block = data.get(section)
        if not isinstance(block, dict) or not block.get("profile"):
            continue
        name = block["profile"]
        if not isinstance(name, str):
            raise InputError(f"{section}.profile must be a profile name, got {name!r}", source,
                             locate(lines, (section, "profile")))
        catalogue = load_catalogue(catalogue_name)
        if name not in catalogue:
            raise InputError(f"unknown {section} profile {name!r}{did_you_mean(name, catalogue)}; known: {', '.join(sorted(catalogue))}",
                             source, locate(lines, (section, "profile")))
        merged = {key: value for key, value in catalogue[name].items() if key != "sources"}
        merged.update(block)
        data[section] = merged
    return data


def _walk(node: Any, path: tuple):
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _walk(value, path + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _walk(value, path + (index,))


_fit_cache: dict[Path, dict] = {}


def load_fit_file(path: Path, source: str, location: str) -> dict:
    path = resolved_path(path, "fit file", source, location)
    if path in _fit_cache:
        return _fit_cache[path]
    if not path.exists():
        raise InputError(f"fit file {str(path)!r} not found", source, location)
    try:
        text = read_input_text(path, "fit file")
        data, _ = load_document(text, str(path))
    except InputError as exc:  # blame the reference, say what is wrong with the file
        raise InputError(f"fit file {str(path)!r}: {exc.message}", source, location) from None
    except yaml.YAMLError as exc:
        raise InputError(f"fit file {str(path)!r} is not valid YAML ({exc.__class__.__name__})", source, location) from None
    if not isinstance(data, dict) or not isinstance(data.get("quantities"), dict):
        raise InputError(f"fit file {str(path)!r} has no 'quantities' mapping (write it with `agentsim fit`)", source, location)
    _fit_cache[path] = data
    return data


def find_fit_file(file_part: str, base_dir: Path, fallback_dirs, source: str, location: str) -> Path:
    """The fit file a reference names: ``base_dir / file_part`` (next to the scenario), else a
    file of the same name in one of ``fallback_dirs`` (the packaged fits), so a scenario copied
    away from its ``fits/`` still runs. The error names every place looked in."""
    beside = resolved_path(base_dir / file_part, "fit file", source, location)
    if beside.exists():
        return beside
    looked = [str(beside)]
    for directory in fallback_dirs:
        candidate = resolved_path(Path(directory) / Path(file_part).name, "fit file", source, location)
        if candidate.exists():
            return candidate
        looked.append(str(candidate))
    raise InputError(f"fit file {file_part!r} not found next to the scenario ({looked[0]})"
                     + (f" nor among the packaged fits ({', '.join(looked[1:])})" if len(looked) > 1 else ""),
                     source, location)


#: The kind of quantity a fit file's ``unit`` states (``agentsim fit`` writes s, tokens, calls,
#: sub-agents); a unit not listed is a count.
_FIT_UNIT_KINDS = {"s": "time", "ms": "time", "us": "time", "min": "time", "m": "time", "h": "time",
                   "tokens": "tokens", "token": "tokens"}


def _field_kind(name: str) -> str:
    """What a scenario field holds, by its name's unit suffix (``tool_gap_s`` a time in seconds,
    ``task_tokens`` tokens, ``fanout`` or ``calls_per_session`` a count)."""
    return "time" if name.endswith("_s") else "tokens" if name.endswith("_tokens") else "count"


def _check_fit_unit(unit, path: tuple, quantity: str, file_part: str, source: str, location: str) -> None:
    """Raise InputError if the fitted quantity's ``unit`` is of another kind than the field it
    is given to (token counts as a gap in seconds), or a time in another unit than seconds: the
    samples would be read as the field's unit without a word."""
    if not isinstance(unit, str):
        return  # a hand-written fit without a unit: nothing to compare
    name = next((part for part in reversed(path) if isinstance(part, str)), "")
    want, have = _field_kind(name), _FIT_UNIT_KINDS.get(unit.strip(), "count")
    if want != have or (have == "time" and unit.strip() != "s"):
        said = {"time": "a time in seconds", "tokens": "a number of tokens", "count": "a count"}[want]
        raise InputError(f"quantity {quantity!r} in {file_part!r} is in {unit!r}, but {name} is {said}: "
                         "reference a quantity of that kind", source, location)


def resolve_fit_references(data: dict, base_dir: Path, source: str, lines: dict, fallback_dirs=()) -> dict:
    """Replace every ``{fit: FILE#quantity, ...}`` mapping by the fitted spec (clip keys kept).

    FILE is looked up next to the scenario, then by name in ``fallback_dirs``
    (:func:`find_fit_file`)."""
    targets = [(path, node) for path, node in _walk(data, ()) if "fit" in node and node.get("dist", "fit") == "fit"]
    for path, node in targets:
        ref = node["fit"]
        location = locate(lines, path + ("fit",))
        if not isinstance(ref, str) or "#" not in ref:
            raise InputError(f"a fit reference must look like 'FILE.yaml#quantity', got {ref!r}", source, location)
        file_part, quantity = ref.split("#", 1)
        fits = load_fit_file(find_fit_file(file_part, base_dir, fallback_dirs, source, location), source, location)
        entry = fits["quantities"].get(quantity)
        if entry is None:
            raise InputError(f"fit file {file_part!r} has no quantity {quantity!r}; it has: {', '.join(sorted(fits['quantities']))}",
                             source, location)
        spec = entry.get("spec") if isinstance(entry, dict) else None
        if not isinstance(spec, dict):
            raise InputError(f"quantity {quantity!r} in {file_part!r} has no 'spec'", source, location)
        if "fit" in spec:  # resolved once: a fit inside a fit file would be read as no distribution at all
            raise InputError(f"quantity {quantity!r} in {file_part!r} is itself a fit reference; a fit file holds "
                             "fitted specs (write it with `agentsim fit`)", source, location)
        _check_fit_unit(entry.get("unit"), path, quantity, file_part, source, location)
        resolved = dict(spec)
        for key in ("min", "max", "round"):
            if key in node:
                resolved[key] = node[key]
        extra = set(node) - {"fit", "dist", "min", "max", "round"}
        if extra:
            raise InputError(f"unknown key {sorted(extra)[0]!r} next to a fit reference", source, location)
        parent = data
        for part in path[:-1]:
            parent = parent[part]
        parent[path[-1]] = resolved
    return data
