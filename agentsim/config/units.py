"""Unit strings, parsed once at load time.

Scenario files may write quantities with units; the code only ever sees plain numbers in SI
base units (bytes, seconds, bytes per second, FLOP/s), named with their unit
(``capacity_bytes``, ``latency_s``).

Accepted forms:
* bytes: ``288GB`` (10^9), ``279GiB`` (2^30), ``512MB``, ``4TB``, ``1.5e9``, ``100B``;
* bandwidth: ``900GB/s``, ``8TB/s``, ``50GiB/s`` (bytes per second), ``400Gb/s`` (bits);
* durations: ``10us``, ``5ms``, ``2s``, ``5m``/``5min``, ``2h``, ``1d`` or a bare number of seconds;
* FLOP/s: ``5PFLOPS``, ``2.5e15``, ``989TFLOPS``.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import BeforeValidator, WithJsonSchema

_NUMBER = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
_PATTERN = re.compile(rf"^\s*{_NUMBER}\s*([A-Za-z/µ]*)\s*$")

_DECIMAL = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}

_DURATION = {
    "": 1.0, "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9,
    "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hr": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
}


class UnitError(ValueError):
    """A value with a missing, unknown or wrong unit."""


def _split(value: Any, what: str) -> tuple[float, str]:
    if isinstance(value, bool):
        raise UnitError(f"expected {what}, got a boolean")
    if isinstance(value, (int, float)):
        return float(value), ""
    if not isinstance(value, str):
        raise UnitError(f"expected {what} as a number or a string with a unit, got {type(value).__name__}")
    match = _PATTERN.match(value)
    if not match:
        raise UnitError(f"cannot read {value!r} as {what}")
    return float(match.group(1)), match.group(2)


def _byte_multiplier(prefix_unit: str, value_text: Any) -> float:
    """Multiplier for a unit like GB, GiB, Gb (bits), B, or ''."""
    unit = prefix_unit
    if unit in ("", "B", "byte", "bytes"):
        return 1.0
    bits = False
    if unit.endswith("B"):
        unit = unit[:-1]
    elif unit.endswith("b") and unit[:-1] in {**_DECIMAL, **_BINARY} and unit[:-1] != "":
        unit, bits = unit[:-1], True
    else:
        raise UnitError(f"unknown byte unit in {value_text!r} (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)")
    if unit in _BINARY:
        mult = _BINARY[unit]
    elif unit.upper() in _DECIMAL and unit != "":
        mult = _DECIMAL[unit.upper()]
    else:
        raise UnitError(f"unknown byte unit in {value_text!r} (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)")
    return mult / 8 if bits else mult


def _finite(number: float, value: Any) -> float:
    if not math.isfinite(number):
        raise UnitError(f"{value!r} is not a finite number")
    return number


def parse_bytes(value: Any) -> float:
    """Bytes from ``288GB``, ``279GiB``, ``1e9`` or ``100B``."""
    number, unit = _split(value, "a size in bytes")
    if "/" in unit:
        raise UnitError(f"{value!r} is a bandwidth, expected a size such as '288GB'")
    if unit.lower() in _DURATION and unit not in ("", "B") and unit not in ("m",):
        raise UnitError(f"{value!r} is a duration, expected a size such as '288GB'")
    if len(unit) > 1 and unit.endswith("b") and unit[:-1] in {**_DECIMAL, **_BINARY}:
        # Bits are a unit of link speeds; a capacity written in them is almost surely meant in
        # bytes, and reading it as bits would silently simulate an eighth of the memory.
        raise UnitError(f"{value!r} is in bits (lowercase b); write a size in bytes, e.g. "
                        f"'{number:g}{unit[:-1]}B' (or '{number / 8:g}{unit[:-1]}B' if you meant bits)")
    return _finite(number * _byte_multiplier(unit, value), value)


def parse_bandwidth(value: Any) -> float:
    """Bytes per second from ``900GB/s``, ``8TB/s``, ``400Gb/s`` or a bare number (B/s)."""
    number, unit = _split(value, "a bandwidth")
    if unit == "":
        return _finite(number, value)
    if not unit.endswith("/s"):
        raise UnitError(f"{value!r} is not a bandwidth: write it per second, e.g. '900GB/s'")
    return _finite(number * _byte_multiplier(unit[:-2], value), value)


_DURATION_PART = re.compile(r"\s*(\d+\.?\d*|\.\d+)\s*([A-Za-zµ]+)")


def _compound_duration(value: Any) -> float | None:
    """Seconds from a sum of parts with units, largest first, as the progress lines print
    them (``1h30m``, ``2h 0m 30s``, ``1d12h``); None if ``value`` is not one."""
    if not isinstance(value, str):
        return None
    parts = []
    end = 0
    for match in _DURATION_PART.finditer(value):
        if match.start() != end:
            return None
        parts.append((float(match.group(1)), match.group(2)))
        end = match.end()
    if len(parts) < 2 or value[end:].strip():
        return None
    scales = []
    for _, unit in parts:
        if unit not in _DURATION or unit == "":
            raise UnitError(f"unknown time unit {unit!r} in {value!r} (use us, ms, s, m, h, d)")
        scales.append(_DURATION[unit])
    if any(later >= earlier for earlier, later in zip(scales, scales[1:])):
        raise UnitError(f"cannot read {value!r} as a duration: write its parts largest first, each unit once "
                        "(e.g. '1h30m')")
    return _finite(sum(number * scale for (number, _), scale in zip(parts, scales)), value)


def parse_duration(value: Any) -> float:
    """Seconds from ``10us``, ``5ms``, ``2s``, ``5m``, ``2h``, a bare number of seconds, or parts
    largest first (``1h30m``, ``2h0m30s``, as the progress lines print them)."""
    compound = _compound_duration(value)
    if compound is not None:
        return compound
    number, unit = _split(value, "a duration")
    if unit not in _DURATION:
        raise UnitError(f"unknown time unit in {value!r} (use us, ms, s, m, h, d)")
    return _finite(number * _DURATION[unit], value)


def parse_flops(value: Any) -> float:
    """FLOP/s from ``5PFLOPS``, ``989TFLOPS``, ``2.5e15``."""
    number, unit = _split(value, "a FLOP/s rate")
    if unit == "":
        return _finite(number, value)
    upper = unit.upper().replace("FLOP/S", "FLOPS")
    if not upper.endswith("FLOPS"):
        raise UnitError(f"unknown FLOP/s unit in {value!r} (use e.g. '5PFLOPS' or '989TFLOPS')")
    prefix = upper[: -len("FLOPS")]
    if prefix not in _DECIMAL:
        raise UnitError(f"unknown FLOP/s prefix in {value!r}")
    return _finite(number * _DECIMAL[prefix], value)


def parse_count(value: Any) -> float:
    """A plain count that may be written ``37e9``, ``37B`` (billions), ``15K`` or ``2M``."""
    number, unit = _split(value, "a count")
    scale = {"": 1, "K": 1e3, "k": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
    if unit not in scale:
        raise UnitError(f"unknown count suffix in {value!r} (use K, M, B or T)")
    return _finite(number * scale[unit], value)


def _wrap(parser):
    def validator(value: Any) -> Any:
        if value is None:
            return value
        try:
            return parser(value)
        except UnitError as exc:
            raise ValueError(str(exc)) from None

    return validator


_STR_OR_NUMBER = {"anyOf": [{"type": "number"}, {"type": "string"}]}

Bytes = Annotated[float, BeforeValidator(_wrap(parse_bytes)), WithJsonSchema({**_STR_OR_NUMBER, "description": "bytes, e.g. 288GB or 279GiB"})]
BytesPerSecond = Annotated[float, BeforeValidator(_wrap(parse_bandwidth)), WithJsonSchema({**_STR_OR_NUMBER, "description": "bytes per second, e.g. 900GB/s"})]
Seconds = Annotated[float, BeforeValidator(_wrap(parse_duration)), WithJsonSchema({**_STR_OR_NUMBER, "description": "seconds, e.g. 10us, 5m, 2h, 1h30m"})]
FlopsPerSecond = Annotated[float, BeforeValidator(_wrap(parse_flops)), WithJsonSchema({**_STR_OR_NUMBER, "description": "FLOP/s, e.g. 5PFLOPS"})]
Count = Annotated[float, BeforeValidator(_wrap(parse_count)), WithJsonSchema({**_STR_OR_NUMBER, "description": "a count, e.g. 37e9 or 37B"})]


# ---------------------------------------------------------------------------------------------
# Units from a parameter's name (registered components' ``Params``, ``--param``, display).

def _unit_of(name: str):
    """(parser, formatter) of the unit a parameter's name carries, or None.

    ``..._bytes_per_s`` bandwidth, ``..._flops_per_s`` FLOP/s, ``..._bytes`` bytes, ``..._s``
    seconds; any other ``_per_`` name (``mem_cost_per_block_s``, a rate) is a plain number."""
    if name.endswith("_bytes_per_s"):
        return parse_bandwidth, format_bandwidth
    if name.endswith("_flops_per_s"):
        return parse_flops, format_flops
    if "_per_" in name:
        return None
    if name.endswith("_bytes"):
        return parse_bytes, format_bytes
    if name.endswith("_s"):
        return parse_duration, format_duration
    return None


def parse_by_name(name: str, value: Any) -> Any:
    """``value`` read with the unit ``name`` carries (``ttl_s``, ``..._bytes``,
    ``..._bytes_per_s``, ``..._flops_per_s``) if it is a string; anything else unchanged.
    Raises UnitError."""
    unit = _unit_of(name) if isinstance(value, str) else None
    return unit[0](value) if unit else value


def parse_unit_params(model, params: dict) -> dict:
    """``params`` for the pydantic ``model`` with unit strings read by :func:`parse_by_name`
    for the model's own fields (unknown keys are left for the model to reject).

    Raises pydantic's ValidationError located at the parameter, like the model's own errors."""
    fields = getattr(model, "model_fields", {})
    out = dict(params)
    for key, value in params.items():
        if key not in fields or not isinstance(value, str):
            continue
        annotation = fields[key].annotation
        if annotation is str or not _accepts_number(annotation):
            continue
        try:
            out[key] = parse_by_name(key, value)
        except UnitError as exc:
            from pydantic_core import InitErrorDetails, PydanticCustomError, ValidationError

            raise ValidationError.from_exception_data(getattr(model, "__name__", "Params"), [InitErrorDetails(
                type=PydanticCustomError("unit_error", str(exc)), loc=(key,), input=value)]) from None
    return out


def _accepts_number(annotation) -> bool:
    """Whether a field's annotation admits a float (``float``, ``float | None``, ``Annotated[float, ...]``)."""
    import typing

    if annotation in (float, int):
        return True
    return any(_accepts_number(arg) for arg in typing.get_args(annotation) if arg is not type(None))


def format_bytes(value: float) -> str:
    """``2.16509e11`` -> ``216.5GB`` (decimal prefixes, as hardware is sold)."""
    return _scaled(value, "B", ((1e15, "PB"), (1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "KB")))


def format_bandwidth(value: float) -> str:
    """``9e11`` -> ``900GB/s``."""
    return _scaled(value, "B/s", ((1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1e3, "KB/s")))


def format_flops(value: float) -> str:
    """``7e15`` -> ``7PFLOPS``."""
    return _scaled(value, "FLOPS", ((1e18, "EFLOPS"), (1e15, "PFLOPS"), (1e12, "TFLOPS"), (1e9, "GFLOPS")))


def format_duration(value: float) -> str:
    """Seconds in the largest unit that keeps the number readable: ``0.04551`` -> ``45.5ms``,
    ``300`` -> ``5m``, ``5400`` -> ``1.5h``, ``inf`` -> ``inf``."""
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0s"
    magnitude = abs(value)
    for threshold, scale, unit in ((86400, 86400, "d"), (3600, 3600, "h"), (60, 60, "m"), (1, 1, "s"),
                                   (1e-3, 1e-3, "ms"), (1e-6, 1e-6, "us")):
        if magnitude >= threshold:
            return f"{value / scale:.4g}{unit}"
    return f"{value / 1e-9:.4g}ns"


def format_by_name(name: str, value: float) -> str:
    """A number shown in the unit its name carries (see :func:`parse_by_name`), else plainly."""
    unit = _unit_of(name)
    if unit and isinstance(value, (int, float)) and not isinstance(value, bool):
        return unit[1](float(value))
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return f"{value:g}" if abs(value) < 1e6 else f"{value:.6g}"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _scaled(value: float, base_unit: str, steps) -> str:
    if not math.isfinite(value):
        return str(value)
    for threshold, unit in steps:
        if abs(value) >= threshold:
            return f"{value / threshold:.4g}{unit}"
    return f"{value:.4g}{base_unit}"
