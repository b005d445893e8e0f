"""Packaged hardware and model catalogues (``agentsim/profiles/{hardware,models}.yaml``).

Each entry holds scenario field values (units allowed) plus a ``sources`` mapping that keeps the
citation of every number beside it (from the project's hardware reference). A scenario selects
an entry by name (``hardware.profile: gb300_nvl72``) and may override any field.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

from agentsim.yaml_text import safe_load


@lru_cache(maxsize=None)
def load_catalogue(name: str) -> dict[str, dict]:
    """``name`` is ``hardware`` or ``models``; returns {profile name: fields}."""
    text = resources.files("agentsim").joinpath("profiles", f"{name}.yaml").read_text()
    data = safe_load(text) or {}
    return {key: value for key, value in data.items() if isinstance(value, dict)}
