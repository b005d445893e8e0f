"""Read a scenario YAML file and validate it into a :class:`~agentsim.config.scenario.Scenario`.

The whole load, registry checks included, is :func:`agentsim.engine.loading.load_scenario` (the
composition root); this module is its part that needs nothing above ``config/``.

Responsibilities (all I/O lives here, the models stay inert):
* parse YAML while remembering the line of every key, so errors can name ``file: line N: path``;
* apply ``--set path=value`` overrides (values parsed as YAML scalars);
* fill hardware/model fields from named profiles (explicit fields win);
* resolve ``{fit: FILE#quantity}`` distribution references relative to the scenario file;
* turn pydantic errors into one :class:`~agentsim.errors.InputError` with a did-you-mean.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

import yaml
from pydantic import BaseModel, ValidationError

from agentsim.config.resolve import resolve_fit_references, resolve_profiles
from agentsim.config.scenario import Scenario
from agentsim.config.yaml_paths import LineMap, Path_, blame, format_path
from agentsim.errors import FieldError, InputError, closest_name, did_you_mean
from agentsim.input_files import read_input_text
from agentsim.yaml_text import load_document


# The longest input value quoted back in an error message.
_MAX_QUOTED_CHARS = 120


def _line_map(root: yaml.Node | None) -> dict[Path_, int]:
    """Map YAML paths to 1-based line numbers by walking the composed node graph (iteratively:
    a deep document must not hit the recursion limit)."""
    lines: dict[Path_, int] = {}
    stack: list[tuple[yaml.Node, Path_]] = [(root, ())] if root is not None else []
    while stack:
        node, path = stack.pop()
        lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in reversed(node.value):
                key = key_node.value
                lines.setdefault(path + (key,), key_node.start_mark.line + 1)
                stack.append((value_node, path + (key,)))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in reversed(list(enumerate(node.value))):
                lines.setdefault(path + (index,), item.start_mark.line + 1)
                stack.append((item, path + (index,)))
    return lines


def read_yaml(path: Path) -> tuple[Any, dict[Path_, int]]:
    """Parse a YAML file; return the data and the line map. Raises InputError on any problem.

    The file must be a regular file within the input budget (:mod:`agentsim.input_files`) and
    its document within the node budget (:func:`agentsim.yaml_text.load_document`)."""
    source = str(path)
    text = read_input_text(path, "YAML file")
    try:
        data, root = load_document(text, source)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"YAML syntax error: {problem}", source, where) from None
    if data is None:
        raise InputError("file is empty", source)
    _reject_bad_keys(root, source)
    return data, _line_map(root)


def _reject_bad_keys(root: yaml.Node | None, source: str) -> None:
    """PyYAML keeps the last of two equal keys silently; a scenario that says a thing twice is
    ambiguous, so name the second occurrence instead. A key that is not a plain string (``~``,
    ``null``, a number, a list) names no field: name its line."""
    stack: list[tuple[yaml.Node, Path_]] = [(root, ())] if root is not None else []
    visited: set[int] = set()
    while stack:
        node, path = stack.pop()
        if id(node) in visited:  # an aliased node: checked once
            continue
        visited.add(id(node))
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, value_node in node.value:
                key = key_node.value
                where = f"line {key_node.start_mark.line + 1}: {format_path(path)}"
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != "tag:yaml.org,2002:str":
                    if not (isinstance(key_node, yaml.ScalarNode) and key_node.tag == "tag:yaml.org,2002:merge"):
                        shown = key if isinstance(key_node, yaml.ScalarNode) else "a " + type(key_node).__name__[:-4].lower()
                        raise InputError(f"a key must be a name, got {shown!r} (quote it to use it as text)", source, where)
                if isinstance(key_node, yaml.ScalarNode) and key in seen:
                    raise InputError(f"duplicate key {key!r} (first at line {seen[key]})", source,
                                     f"line {key_node.start_mark.line + 1}: {format_path(path + (key,))}")
                seen[key] = key_node.start_mark.line + 1
                stack.append((value_node, path + (key,)))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, path + (index,)) for index, item in enumerate(node.value))


def parse_override(text: str) -> tuple[list[str], Any]:
    """``cache.eviction.name=s3fifo`` -> (["cache", "eviction", "name"], "s3fifo")."""
    if "=" not in text:
        raise InputError(f"--set expects PATH=VALUE, got {text!r}", "--set")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise InputError(f"--set has an empty path in {text!r}", "--set")
    try:
        # Through the same expanded-size and number checks as a file: a value is YAML too.
        value = load_document(raw, f"--set {text}")[0] if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Return a copy of ``data`` with every ``PATH=VALUE`` override applied (creating mappings)."""
    data = copy.deepcopy(data)
    for text in overrides:
        parts, value = parse_override(text)
        node = data
        for depth, part in enumerate(parts[:-1]):
            if isinstance(node, list):
                try:
                    node = node[int(part)]
                    continue
                except (ValueError, IndexError):
                    raise InputError(f"no list item {part!r} at {'.'.join(parts[:depth + 1])}", "--set") from None
            nxt = node.get(part)
            if nxt is None:
                nxt = node[part] = {}
            elif isinstance(nxt, str):
                # Policy shorthand (`eviction: lru`) is the mapping {name: lru}, at any depth
                # (`--set cache.eviction.params.ttl_s=60` on `eviction: ttl_expiry`).
                nxt = node[part] = {"name": nxt}
            elif not isinstance(nxt, (dict, list)):
                raise InputError(f"{'.'.join(parts[:depth + 1])} is a value, not a section", "--set")
            node = nxt
        if isinstance(node, list):
            try:
                node[int(parts[-1])] = value
            except (ValueError, IndexError):
                raise InputError(f"no list item {parts[-1]!r} in {'.'.join(parts[:-1])}", "--set") from None
        else:
            if (parts[-1] == "name" and isinstance(node.get("params"), dict)
                    and node.get("name") not in (None, value)):
                # Parameters belong to the policy they were written for: switching the policy
                # by name (a --set or a sweep axis) starts from the new policy's defaults.
                del node["params"]
            node[parts[-1]] = value
    return data


def _model_at(path: Path_, root: type[BaseModel] = Scenario) -> type[BaseModel] | None:
    """The pydantic model that owns the mapping at ``path`` below ``root`` (for did-you-mean on
    unknown keys)."""
    model: Any = root
    for part in path:
        if model is None:
            return None
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if hasattr(model, "model_fields") else None
        if field is None:
            return None
        model = _unwrap(field.annotation, part)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _unwrap(annotation: Any, key: str) -> Any:
    import typing

    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if origin is dict:
        return _DictOf(typing.get_args(annotation)[1])
    for arg in typing.get_args(annotation):
        found = _unwrap(arg, key)
        if found is not None:
            return found
    return None


class _DictOf:
    def __init__(self, value_type):
        self.value_type = value_type
        self.model_fields = _AnyKey(value_type)


class _AnyKey(dict):
    def __init__(self, value_type):
        super().__init__()
        self.value_type = value_type

    def get(self, key, default=None):
        return _FakeField(self.value_type)


class _FakeField:
    def __init__(self, annotation):
        self.annotation = annotation


def _error_path(loc: tuple) -> Path_:
    """Drop pydantic's union/discriminator tags (e.g. 'lognormal', 'function-before[...]', and a
    trailing union member such as the 'int' of ``seeds.int``)."""
    out: list[str | int] = []
    for part in loc:
        if isinstance(part, str) and ("[" in part or part in _DIST_TAGS):
            continue
        out.append(part)
    if len(out) > 1 and out[-1] in _TYPE_TAGS:
        out.pop()
    return tuple(out)


#: Union members pydantic names in an error's path (``seeds: int | list[int]`` fails as ``seeds.int``).
_TYPE_TAGS = {"int", "float", "str", "bool", "none"}
_DIST_TAGS = {"constant", "exponential", "lognormal", "gamma", "weibull", "loglogistic", "pareto", "uniform", "empirical", "mixture", "fit"}


def _primary_error(errors: list[dict]) -> dict:
    """The error to report: the first, unless a required key is missing beside an unknown key
    that is close to its name.

    A misspelt required key gives both errors; the unknown one is the cause, and it has a line
    and a did-you-mean, while the missing one has neither. (An unknown key unlike the missing
    one, as in a scenario given where a sweep file belongs, leaves the missing key first.)
    """
    for missing in errors:
        if missing["type"] != "missing":
            continue
        path = _error_path(tuple(missing["loc"]))
        if not path:
            continue
        for error in errors:
            if error["type"] != "extra_forbidden":
                continue
            unknown = _error_path(tuple(error["loc"]))
            if unknown and unknown[:-1] == path[:-1] and closest_name(unknown[-1], [path[-1]], cutoff=0.75):
                return error
    return errors[0]


def validation_error_to_input_error(exc: ValidationError, source: str, lines: dict[Path_, int],
                                    root: type[BaseModel] = Scenario) -> InputError:
    """The first error of a pydantic ValidationError of model ``root`` as one readable InputError
    (see :func:`_primary_error` for the one exception): the YAML line and path, and for an
    unknown key the closest known one."""
    error = _primary_error(exc.errors())
    loc = tuple(error["loc"])
    # An unknown key is the last part of its location even when it is spelt like a union tag
    # (a top-level key named 'lognormal' must not be dropped as one).
    path = _error_path(loc[:-1]) + loc[-1:] if error["type"] == "extra_forbidden" else _error_path(loc)
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, FieldError):  # a cross-field check that names the field it blames
        path = path + cause.path
    message = error["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, "):]
    if error["type"] == "extra_forbidden":
        key = path[-1]
        owner = _model_at(path[:-1], root)
        hint = did_you_mean(key, owner.model_fields, cutoff=0.5) if owner is not None else ""
        message = f"unknown key {key!r}{hint}"
    elif error["type"] == "missing":
        message = f"missing required key {path[-1]!r}" if path else "missing required key"
    elif error["type"] in ("union_tag_invalid",):
        message = f"unknown distribution {error.get('input', {}).get('dist') if isinstance(error.get('input'), dict) else error.get('input')!r}; expected one of {error['ctx'].get('expected_tags')}"
    elif "input" in error and not isinstance(error["input"], (dict, list)):
        got = repr(error["input"])
        if len(got) > _MAX_QUOTED_CHARS:  # a 100,000-character value would bury the message
            got = f"{got[:_MAX_QUOTED_CHARS]}... ({len(got):,} characters)"
        message = f"{message} (got {got})"
    return InputError(message, *blame(lines, source, path))  # a --set value is blamed on the option


def read_scenario(path: str | Path, overrides: list[str] | None = None,
                  seed: int | None = None) -> tuple[dict, dict[Path_, int]]:
    """Read a scenario file and apply ``--set`` overrides and the seed: the raw mapping and its
    line map, not yet validated. Raises InputError on any problem."""
    path = Path(path)
    data, lines = read_yaml(path)
    if not isinstance(data, dict):
        raise InputError(f"a scenario must be a mapping of sections, got {type(data).__name__}", str(path), "line 1")
    if "base" in data and "axes" in data and "workload" not in data:
        raise InputError(f"this is a sweep file, not a scenario: run it with 'agentsim sweep {path}'", str(path), "line 1")
    if overrides:
        data = apply_overrides(data, overrides)
        lines = LineMap(lines)
        for text in overrides:
            parts, _ = parse_override(text)
            lines.overrides[tuple(int(p) if p.isdigit() else p for p in parts)] = text.strip()
    if seed is not None:
        data["seed"] = seed
    return data, lines


def validate_scenario(data: dict, source: str, lines: dict[Path_, int], base_dir: Path | None,
                      load_catalogue: Callable[[str], dict[str, dict]], fit_dirs=()) -> Scenario:
    """Resolve profiles (from ``load_catalogue``) and fit references (next to the scenario, then
    in ``fit_dirs``) in a parsed scenario mapping and validate it; registered names are checked
    by the caller (the composition root)."""
    data = resolve_profiles(copy.deepcopy(data), source, lines, load_catalogue)
    data = resolve_fit_references(data, base_dir or Path("."), source, lines, fit_dirs)
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise validation_error_to_input_error(exc, source, lines) from None


def scenario_to_yaml(scenario: Scenario) -> str:
    """The resolved scenario (all defaults filled in, units in SI numbers) as YAML."""
    return yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False)
