"""Name -> class registries for pluggable components (policies, routers, distributions).

A registered class may declare a nested pydantic model ``Params``; the registry validates a
scenario's parameter dict against it, so a typo in a policy parameter is reported with the
parameter's YAML path like any other scenario error.

A registry lives outside the package of its plugins (e.g. ``agentsim/cache/registries.py`` for
the policies of ``agentsim/cache/policies/``), so a plugin module imports the registry without
importing the package that imports every plugin. Two ways make every built-in available
whichever module a caller imported first:

- *declared* names (:meth:`Registry.declare`): the registry knows each built-in's name and the
  module that registers it, and imports that one module the first time the name is looked up,
  so a command that needs one policy does not pay for importing twenty;
- a ``plugins`` package: imported whole on the first lookup (for registries whose plugins are
  few and cheap).
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from agentsim.config.units import parse_unit_params
from agentsim.errors import did_you_mean

T = TypeVar("T")


class Registry(Generic[T]):
    """A named collection of component classes of one kind (e.g. "eviction policy")."""

    def __init__(self, kind: str, plugins: str | None = None):
        self.kind = kind
        self._classes: dict[str, type[T]] = {}
        self._plugins = plugins
        self._declared: dict[str, str] = {}  # name -> module that registers it when imported

    def _load_plugins(self) -> None:
        """Import the plugin package once (its modules register themselves)."""
        if self._plugins is not None:
            package, self._plugins = self._plugins, None  # cleared first: the import re-enters
            importlib.import_module(package)

    def declare(self, names: list[str], module: str) -> None:
        """Promise that importing ``module`` registers every name of ``names``.

        The names are listed and accepted at once; the module is imported on first lookup.
        """
        for name in names:
            self._declared[name] = module

    def _load(self, name: str) -> None:
        """Make ``name`` registered if a declaration or the plugin package provides it."""
        if name in self._classes:
            return
        module = self._declared.get(name)
        if module is None:
            self._load_plugins()
            return
        importlib.import_module(module)
        if name not in self._classes:
            raise RuntimeError(f"{module} was declared to register {self.kind} {name!r} but did not")

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        def decorator(cls: type[T]) -> type[T]:
            if name in self._classes:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            self._classes[name] = cls
            cls.registered_name = name  # type: ignore[attr-defined]
            return cls

        return decorator

    def unregister(self, name: str) -> None:
        """Remove a registration (for tests that register a throw-away class)."""
        self._classes.pop(name, None)

    def names(self) -> list[str]:
        self._load_plugins()
        return sorted(set(self._classes) | set(self._declared))

    def __contains__(self, name: str) -> bool:
        if name in self._classes or name in self._declared:
            return True
        self._load_plugins()
        return name in self._classes

    def get(self, name: str) -> type[T]:
        self._load(name)
        try:
            return self._classes[name]
        except KeyError:
            raise KeyError(self.unknown_message(name)) from None

    def unknown_message(self, name: str) -> str:
        return f"unknown {self.kind} {name!r}{did_you_mean(name, self.names())}; known: {', '.join(self.names())}"

    def params_model(self, name: str) -> type[BaseModel] | None:
        return getattr(self.get(name), "Params", None)

    def validate_params(self, name: str, params: dict[str, Any] | None) -> BaseModel | None:
        """Validate ``params`` against the class's Params model (raises pydantic ValidationError).

        A string given to a number parameter whose name carries a unit (``ttl_s: 20m``,
        ``..._bytes: 2GB``) is read with that unit first, as everywhere in a scenario."""
        model = self.params_model(name)
        if model is None:
            if params:
                raise ValueError(f"{self.kind} {name!r} takes no parameters")
            return None
        return model.model_validate(parse_unit_params(model, params or {}))

    def create(self, name: str, params: dict[str, Any] | None = None) -> T:
        """A new instance of the class registered as ``name``, given its validated ``params``
        (raises KeyError for an unknown name, pydantic ValidationError for bad parameters)."""
        return self.get(name)(self.validate_params(name, params))


def describe_params(model: type[BaseModel] | None) -> list[tuple[str, str, str]]:
    """(name, default, description) rows for a Params model, for ``agentsim policies``.

    A default made by a factory is shown as the value the factory makes; numbers whose name
    carries a unit are shown in that unit (``ttl_s`` 300 -> ``5m``)."""
    if model is None:
        return []
    rows = []
    for field_name, field in model.model_fields.items():
        if field.is_required():
            default = "required"
        else:
            default = format_param_value(field_name, field.get_default(call_default_factory=True))
        rows.append((field_name, default, field.description or ""))
    return rows


def format_param_value(name: str, value: Any) -> str:
    """A parameter value as a user would write it in a scenario (units from the name's suffix)."""
    from agentsim.config.units import format_by_name

    if isinstance(value, bool) or value is None:
        return str(value).lower() if value is not None else "null"
    if isinstance(value, (int, float)):
        return format_by_name(name, value)
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {format_param_value(str(k), v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value) if isinstance(value, (set, frozenset)) else value
        return "[" + ", ".join(format_param_value(name, v) for v in items) + "]"
    return str(value)


def summary_line(cls: type) -> str:
    """The first paragraph of a class's docstring on one line, reST inline literals
    (````name````) shown as plain text."""
    doc = (cls.__doc__ or "").strip()
    paragraph = doc.split("\n\n", 1)[0]
    return " ".join(paragraph.split()).replace("``", "")


__all__ = ["Registry", "describe_params", "format_param_value", "summary_line", "ValidationError"]
