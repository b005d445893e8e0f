"""Policy parameters from the command line: ``--param key=value`` (replay).

A value is read as YAML (``60``, ``true``, ``inf``, ``[1, 2]``, ``s3fifo``), and a string given
to a parameter whose name carries a unit is parsed with that unit, as in a scenario file:
``tau_s=5m`` (seconds), ``..._bytes=2GB``, ``..._bytes_per_s=900GB/s``. The policy's own
``Params`` model then validates the whole mapping, so every policy accepts exactly the
parameters ``agentsim policies`` lists. Every error names the ``--param`` option it came from.
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import ValidationError

from agentsim.config.units import UnitError, parse_by_name
from agentsim.errors import InputError, did_you_mean
from agentsim.yaml_text import load_document


def _with_unit(key: str, value: Any, option: str) -> Any:
    try:
        return parse_by_name(key, value)
    except UnitError as exc:
        raise InputError(str(exc), option) from None


def parse_param_options(items: list[str]) -> dict[str, Any]:
    """``["tau_s=5m", "base=s3fifo"]`` -> ``{"tau_s": 300.0, "base": "s3fifo"}`` (InputError on bad syntax)."""
    params: dict[str, Any] = {}
    for text in items:
        option = f"--param {text}"
        if "=" not in text:
            raise InputError(f"expected KEY=VALUE, got {text!r}", "--param")
        key, raw = (part.strip() for part in text.split("=", 1))
        if not key:
            raise InputError("empty parameter name", option)
        if key in params:
            raise InputError(f"parameter {key!r} given twice", option)
        try:
            value = load_document(raw, option)[0] if raw else ""  # size and number checks of a file
        except yaml.YAMLError:
            value = raw
        params[key] = _with_unit(key, value, option)
    return params


def validate_policy_params(registry, name: str, params: dict[str, Any], items: list[str] | None = None):
    """The policy's validated ``Params`` (or None); an InputError names the offending ``--param``.

    ``items`` are the original ``KEY=VALUE`` texts, used to quote the option in the message.
    """
    by_key = {text.split("=", 1)[0].strip(): text for text in items or []}
    try:
        return registry.validate_params(name, params)
    except ValidationError as exc:
        error = exc.errors()[0]
        key = str(error["loc"][0]) if error.get("loc") else ""
        option = f"--param {by_key[key]}" if key in by_key else "--param"
        if error.get("type") == "extra_forbidden":
            known = list(registry.params_model(name).model_fields)
            raise InputError(f"policy {name!r} has no parameter {key!r}{did_you_mean(key, known)}; "
                             f"it takes: {', '.join(known) or 'none'}", option) from None
        raise InputError(f"policy {name!r}: {key}: {error['msg']}", option) from None
    except ValueError as exc:  # "takes no parameters"
        raise InputError(str(exc), "--param") from None
