"""Eviction regime per cache tier, and whether a TTL can fire on the tier it applies to.

A tier is ``capacity_bound`` when capacity removed at least as many of its blocks as TTL expiry
(with lower tiers, HBM capacity evictions are demotions: HBM is still capacity-bound),
``ttl_bound`` when TTL expiry removed more, ``no_eviction`` when neither removed any. So a
tier's regime agrees with its own evictions: a tier that evicted blocks is never
``no_eviction``.

A TTL ``tau`` on tier ``t`` can only fire when a block stays idle in ``t`` for ``tau``: if ``t``
evicts blocks for capacity after a median idle age ``T_C(t)`` shorter than ``tau`` (plus the
longest pin), blocks leave before their TTL, and the run behaves as the TTL's base policy.
:func:`ttl_diagnostics` compares the TTL with *that tier's* T_C (``ttl_margin_s``) and words a
warning when the TTL did not fire.
"""

from __future__ import annotations

import math
from typing import Any

#: Removal reasons that count as capacity pressure on a tier (pin time-outs and pressure unpins
#: end in a capacity eviction of the released block).
CAPACITY_REASONS = ("capacity", "pin_timeout", "pressure_unpin")


def regime_of(capacity_blocks: int, expired_blocks: int) -> str:
    """The regime of removals: ``no_eviction``, ``capacity_bound`` or ``ttl_bound``."""
    if capacity_blocks == 0 and expired_blocks == 0:
        return "no_eviction"
    return "capacity_bound" if capacity_blocks >= expired_blocks else "ttl_bound"


def tier_regimes(by_tier_reasons: dict[str, dict[str, int]]) -> dict[str, str]:
    """``{tier: regime}`` from each tier's removals by reason (blocks)."""
    return {tier: regime_of(sum(reasons.get(r, 0) for r in CAPACITY_REASONS), reasons.get("ttl_expiry", 0))
            for tier, reasons in by_tier_reasons.items()}


#: The keys :func:`ttl_diagnostics` returns, in its order.
TTL_DIAGNOSTIC_KEYS = ("ttl_tier", "ttl_tier_characteristic_eviction_time_s", "ttl_margin_s", "ttl_warning")


def ttl_diagnostics(ttl_s: float | None, ttl_tier: str | None, tier_t_c_s: dict[str, float],
                    by_tier_reasons: dict[str, dict[str, int]], max_pin_s: float, simulated_s: float) -> dict[str, Any]:
    """``ttl_tier``, ``ttl_tier_characteristic_eviction_time_s`` (T_C of the TTL's tier),
    ``ttl_margin_s = ttl_s - that T_C`` (None without a TTL or without capacity evictions there)
    and ``ttl_warning`` (None, or why the TTL did not fire)."""
    out: dict[str, Any] = dict.fromkeys(TTL_DIAGNOSTIC_KEYS)
    out["ttl_tier"] = ttl_tier
    if ttl_s is None or ttl_tier is None:
        return out
    t_c = tier_t_c_s.get(ttl_tier, float("nan"))
    if math.isfinite(t_c):
        out["ttl_tier_characteristic_eviction_time_s"] = t_c
        out["ttl_margin_s"] = ttl_s - t_c
    reasons = by_tier_reasons.get(ttl_tier, {})
    if reasons.get("ttl_expiry", 0) > 0:
        return out
    capacity = sum(reasons.get(r, 0) for r in CAPACITY_REASONS)
    if capacity > 0 and math.isfinite(t_c):
        out["ttl_warning"] = (
            f"the TTL ({ttl_s:g} s on {ttl_tier}) never fired: {ttl_tier} evicts blocks for capacity after a median "
            f"idle time of {t_c:.3g} s (T_C), shorter than the TTL (plus pins up to {max_pin_s:.3g} s), so the run "
            f"behaves as the TTL's base policy; a TTL below {t_c:.3g} s, or more {ttl_tier} capacity, would let it fire")
    elif ttl_s >= simulated_s:
        out["ttl_warning"] = (f"the TTL ({ttl_s:g} s on {ttl_tier}) never fired: it is longer than the run "
                              f"({simulated_s:.3g} simulated s)")
    else:
        out["ttl_warning"] = (f"the TTL ({ttl_s:g} s on {ttl_tier}) never fired: no block of {ttl_tier} stayed idle "
                              f"that long")
    return out
