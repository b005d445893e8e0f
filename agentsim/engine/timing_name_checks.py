"""Check the names a scenario gives its deployment against what aiconfigurator-core knows.

``hardware.system``, ``serving.engine_version``, ``serving.precision.*`` and ``model.name`` are
free text that selects a measured database, a kernel dtype or a model config. A typo in one
(``h100``, ``0.27``, ``FP8``, ``deepseek_v3``) used to pass silently: the timing fell back to the
roofline with a reason few read, and a precision typo also sized the weights at the model's
published format. A name aiconfigurator-core does not know at all is refused here, at load time,
with its YAML line and the known names; a name it knows whose data it lacks (a system without a
database for the engine, a version another system was measured with) still falls back to the
roofline with its reason (:mod:`agentsim.hardware.timing.select`).
"""

from __future__ import annotations

import os
import re

from agentsim.config.yaml_paths import blame
from agentsim.errors import InputError, did_you_mean
from agentsim.hardware.timing import database_names
from agentsim.hardware.timing.deployment import MODEL_ALIASES

#: A Hugging Face model id: OWNER/NAME of letters, digits, '-', '_' and '.'.
_HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _choice_hint(name: str, known, cutoff: float = 0.6) -> str:
    """A did-you-mean for ``name``: a spelling that differs only in case first, else the closest."""
    for choice in known:
        if choice.lower() == name.lower():
            return f" (did you mean {choice!r}?)"
    return did_you_mean(name, known, cutoff)


def _unknown(kind: str, name: str, known, path: tuple, source: str, lines: dict, advice: str = "",
             cutoff: float = 0.6) -> InputError:
    """``unknown KIND 'name' (did you mean ...?)ADVICE; known: ...`` blamed on ``path``."""
    known = list(known)
    return InputError(f"unknown {kind} {name!r}{_choice_hint(name, known, cutoff)}{advice}; known: {', '.join(known)}",
                      *blame(lines, source, path))


def check_timing_names(scenario, source: str, lines: dict) -> None:
    """Raise InputError if the scenario names a system, engine version, precision or model that
    aiconfigurator-core does not know (nothing is checked when the package is not installed)."""
    hardware, serving, model = scenario.hardware, scenario.serving, scenario.model
    systems = database_names.system_names()
    if hardware.system is not None and systems is not None and hardware.system not in systems:
        raise _unknown("GPU system", hardware.system, systems, ("hardware", "system"), source, lines,
                       " (leave hardware.system out for roofline timing)")
    for key in database_names.PRECISION_ENUMS:
        value = getattr(serving.precision, key)
        known = database_names.precision_names(key) if value is not None else None
        if known is not None and value not in known:
            raise _unknown(f"{key} precision", value, known, ("serving", "precision", key), source, lines)
    if serving.engine_version is not None:
        _check_engine_version(scenario, source, lines)
    if model.name is not None:
        _check_model_name(model.name, source, lines)


def _check_engine_version(scenario, source: str, lines: dict) -> None:
    versions = database_names.measured_versions()
    if versions is None:
        return
    engine, system, version = scenario.serving.engine, scenario.hardware.system, scenario.serving.engine_version
    anywhere = sorted({v for engines in versions.values() for v in engines.get(engine, ())})
    if version in anywhere:
        return  # a version some system was measured with; this system may lack it (roofline, with the reason)
    here = versions.get(system, {}).get(engine)
    scope = f" on {system}" if here else ""
    raise _unknown(f"{engine} version", version, here or anywhere, ("serving", "engine_version"), source, lines,
                   f" in the measured databases{scope} (leave engine_version out for the newest)",
                   cutoff=0.8)  # version strings all look alike: suggest only a near-identical one


def _check_model_name(name: str, source: str, lines: dict) -> None:
    bundled = database_names.bundled_models()
    if bundled is None:
        return
    known = sorted(set(bundled) | set(MODEL_ALIASES))
    if name in known:
        return
    misspelt = any(choice.lower() == name.lower() for choice in known)
    # Any other Hugging Face id is valid (aiconfigurator-core downloads its config; without it
    # timing is the roofline, with the reason), as is a local directory holding a config.json.
    if not misspelt and (_HF_ID.match(name) or os.path.isdir(name)):
        return
    hint = _choice_hint(name, known)
    what = ("not the spelling aiconfigurator-core bundles it under (Hugging Face ids are case-sensitive)" if misspelt
            else "neither a Hugging Face id (OWNER/NAME) nor a directory holding a config.json")
    raise InputError(f"unknown model {name!r}{hint}: {what}; bundled: {', '.join(bundled[:8])}, ... "
                     f"({len(bundled)} in all)", *blame(lines, source, ("model", "name")))
