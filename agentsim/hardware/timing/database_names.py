"""The names aiconfigurator-core's measured databases know: systems, engine versions, precisions
and bundled models, read from the installed package (nothing here is a copy of its lists).

A scenario names its deployment in these terms (``hardware.system``, ``serving.engine_version``,
``serving.precision.*``, ``model.name``), and a name the package does not know at all is a typo,
not a deployment the databases happen to lack: it is refused at load time
(:func:`agentsim.engine.checks.check_timing_names`) rather than timed with the roofline. A name
the package knows but has no measured data for (a system whose directory holds no database, an
engine the system was not measured with) still falls back to the roofline with its reason
(:mod:`.select`).

Every function returns ``None`` when aiconfigurator-core is not installed: then nothing can be
checked, and timing is the roofline anyway ("aiconfigurator-core is not installed").
"""

from __future__ import annotations

import functools
import os
import re

from agentsim.hardware.timing.tables import package_version

#: Precision keys of ``serving.precision`` and the aiconfigurator-core enum naming each one's modes.
PRECISION_ENUMS = {"weights": "GEMMQuantMode", "moe": "MoEQuantMode", "kv_cache": "KVCacheQuantMode",
                   "attention": "FMHAQuantMode"}


@functools.cache
def precision_names(key: str) -> tuple[str, ...] | None:
    """The quantisation modes aiconfigurator-core defines for ``serving.precision.<key>``."""
    if package_version() is None:
        return None
    from aiconfigurator_core.sdk import common

    return tuple(mode.name for mode in getattr(common, PRECISION_ENUMS[key]))


#: The top-level keys every aiconfigurator-core system spec has.
_SYSTEM_KEYS = (re.compile(r"^gpu:", re.M), re.compile(r"^data_dir:", re.M))


@functools.cache
def system_names() -> tuple[str, ...] | None:
    """Every GPU system aiconfigurator-core describes (a ``systems/*.yaml`` with a ``gpu``
    section), whether or not a measured database ships for it."""
    if package_version() is None:
        return None
    from aiconfigurator_core.sdk.perf_database import get_systems_paths

    names = set()
    for root in get_systems_paths():
        try:
            entries = os.listdir(root)
        except OSError:
            continue
        for entry in entries:
            if not entry.endswith(".yaml"):
                continue
            try:
                with open(os.path.join(root, entry), encoding="utf-8") as handle:
                    text = handle.read()
            except (OSError, UnicodeDecodeError):
                continue
            # Beside the systems the directory holds manifests and defaults, which name no GPU.
            # Top-level keys are read from the text: parsing the 64 KB manifest as YAML would
            # cost a fifth of a second of every scenario load.
            if _SYSTEM_KEYS[0].search(text) and _SYSTEM_KEYS[1].search(text):
                names.add(entry[: -len(".yaml")])
    return tuple(sorted(names))


@functools.cache
def measured_versions() -> dict[str, dict[str, tuple[str, ...]]] | None:
    """{system: {engine: versions}} of the measured databases that ship with the package."""
    if package_version() is None:
        return None
    from aiconfigurator_core.sdk.perf_database import get_supported_databases

    return {system: {engine: tuple(versions) for engine, versions in engines.items()}
            for system, engines in get_supported_databases().items()}


@functools.cache
def bundled_models() -> tuple[str, ...] | None:
    """The Hugging Face ids whose configs ship with the package (others are downloaded)."""
    if package_version() is None:
        return None
    from aiconfigurator_core.sdk import common

    return tuple(sorted(common.DefaultHFModels))
