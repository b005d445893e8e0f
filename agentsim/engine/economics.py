"""Token economics of one run: GPU-seconds, GPU cost per million tokens, provider-style cache bill.

Two views of money, both added to every run's ``summary.json``:

1. **Operator cost** (what the cluster costs to run). ``gpu_seconds`` = simulated time x GPUs
   (the GPUs are paid for whether busy or idle), priced at ``hardware.price_usd_per_gpu_hour``.
   The cost is split between input (prefill) and output (decode) tokens by the estimated share
   of busy time spent on prefill: the roofline prefill time of every computed prompt token
   (``RooflineCostModel.prefill_flops`` of the recomputed tokens after their cached prefix, at
   the instance's FLOP/s at MFU), divided by the instances' busy time. Decode gets the rest.
   This is an attribution, not a measurement: in mixed iterations decode rides along with
   prefill, so the prefill share is an upper bound of its own. Idle time is shared pro rata.
   ``cost_per_million_tokens_usd`` (blended over input + output tokens) needs no attribution.

2. **Provider bill** (what a customer of a provider-style prompt cache would pay), from
   ``../shared/reference/hardware.md`` section 4.1 (Anthropic pricing, [secondhand]): prompt
   tokens read from the cache cost 0.1x the base input price; prompt tokens that had to be
   computed are written to the cache at 1.25x (5-minute TTL) or 2x (1-hour TTL); output tokens
   at the output price. Base prices default to a Sonnet-class list price of $3 / $15 per million
   input / output tokens (same section). Only the ratios matter when comparing TTL choices: a
   longer TTL makes writes dearer but should turn more recomputes into 0.1x reads. The write
   multiplier follows the scenario's TTL: the eviction policy's ``ttl_s`` parameter if it has
   one (<= 5 min -> 1.25x, longer -> 2x, the dearest tier), otherwise the default 5-minute tier.

3. **Memory cost**: HBM comes with the GPUs (in the GPU-hour price), so HBM KV capacity costs
   nothing extra; every tier below HBM is charged for its configured capacity (all instances)
   at its tier kind's price per GB-month over the simulated time (a month = 730 h). The price
   is a property of the kind (``TierKind.usd_per_gb_month``: DRAM, disk and remote read the
   hardware profile's ``dram_usd_per_gb_month``, ``nvme_usd_per_gb_month``,
   ``remote_usd_per_gb_month``; sources in docs/experiments.md), overridden per tier by
   ``cache.tiers.<name>.usd_per_gb_month``. A kind with no price (one registered without it)
   is charged at zero, listed in ``memory_unpriced_tiers`` and warned about before the run
   (:func:`unpriced_tier_warning`): a plan must not find it cheaper by a silent omission.
   ``total_cost_usd`` = GPU + memory cost;
   ``cost_usd_per_hour`` is what the deployment costs per hour of operation, the quantity a
   capacity plan minimises.

Token counts cover every request that was served (rejected requests excluded, warm-up
included), because GPU-seconds cover the whole run too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from agentsim.config.units import UnitError, parse_duration
from agentsim.hardware.tier_kinds import TIER_KINDS, tier_price_usd_per_gb_month
from agentsim.metrics.summary import rows_where

TTL_5M_S = 300.0
HOURS_PER_MONTH = 730.0      # the cloud billing convention (8,760 h / 12)
TTL_1H_S = 3600.0


@dataclass(frozen=True)
class ProviderPrices:
    """Provider-style list prices (USD per million tokens) and cache multipliers of the input price."""

    input_usd_per_million: float = 3.0
    output_usd_per_million: float = 15.0
    cache_read_multiplier: float = 0.1
    cache_write_5m_multiplier: float = 1.25
    cache_write_1h_multiplier: float = 2.0

    def write_multiplier(self, ttl_s: float | None) -> float:
        """Write multiplier for a cache TTL: the cheapest provider tier that keeps blocks that long."""
        if ttl_s is None or ttl_s <= TTL_5M_S:
            return self.cache_write_5m_multiplier
        return self.cache_write_1h_multiplier


DEFAULT_PRICES = ProviderPrices()


def scenario_ttl_s(scenario) -> float | None:
    """The eviction policy's TTL in seconds: its validated ``ttl_s`` parameter (so a policy whose
    TTL is a default, like ``ttl_1h``, counts too), else a raw ``ttl_s``/``ttl`` parameter."""
    ref = scenario.cache.eviction
    try:
        from agentsim.cache.policies import EVICTION_POLICIES

        params = EVICTION_POLICIES.validate_params(ref.name, ref.params)
        value = getattr(params, "ttl_s", None)
        if isinstance(value, (int, float)) and value > 0:
            return float(value)
    except Exception:  # noqa: BLE001 - unknown policy or params: fall back to the raw mapping
        pass
    params = ref.params or {}
    for key in ("ttl_s", "ttl"):
        if key in params and params[key] is not None:
            try:
                return parse_duration(params[key])
            except UnitError:
                return None
    return None


def memory_cost(scenario, tiers: list[dict], simulated_s: float) -> dict:
    """Cost of the tiers below HBM over ``simulated_s``: ``tiers`` as in
    ``summary["deployment"]["tiers"]`` (one instance's tiers, capacities in bytes), charged
    for every instance at the tier kind's price
    (:func:`~agentsim.hardware.tier_kinds.tier_price_usd_per_gb_month`). Returns
    ``memory_cost_usd``, ``memory_cost_by_tier_usd``, ``memory_usd_per_hour`` and
    ``memory_unpriced_tiers``: tiers whose kind has no price, charged at zero (stated, not hidden)."""
    hw = scenario.hardware
    by_tier: dict[str, float] = {}
    unpriced: list[str] = []
    per_hour = 0.0
    for tier in tiers:
        kind = TIER_KINDS.get(tier["name"])
        if kind is not None and not kind.lower:   # HBM and peer HBM: part of the GPU price
            continue
        price = tier_price_usd_per_gb_month(tier["name"], hw, _tier_config(scenario, tier["name"]))
        if price is None:
            unpriced.append(tier["name"])
            price = 0.0
        usd_per_hour = tier["capacity_bytes"] * hw.instances / 1e9 * price / HOURS_PER_MONTH
        per_hour += usd_per_hour
        by_tier[tier["name"]] = usd_per_hour * simulated_s / 3600.0
    return {"memory_cost_usd": sum(by_tier.values()), "memory_cost_by_tier_usd": by_tier, "memory_usd_per_hour": per_hour,
            "memory_unpriced_tiers": unpriced}


def _tier_config(scenario, name: str):
    tiers = scenario.cache.tiers
    return getattr(tiers, name, None) if tiers is not None else None


def unpriced_tier_warning(scenario) -> str | None:
    """Why some enabled tier's capacity will be charged at zero (its kind has no price), or None."""
    tiers = scenario.cache.tiers
    if tiers is None:
        return None
    names = [name for name, tier in tiers.enabled_tiers()
             if tier_price_usd_per_gb_month(name, scenario.hardware, tier) is None]
    if not names:
        return None
    listed = ", ".join(names)
    return (f"no price per GB-month for tier {listed} (its tier kind gives none): its capacity is charged at $0 in "
            f"memory_cost_usd and total_cost_usd (summary: memory_unpriced_tiers); set "
            f"cache.tiers.{names[0]}.usd_per_gb_month")


def _prefill_seconds(scenario, served: pd.DataFrame) -> float:
    """Roofline prefill time (s) of every computed prompt token, at the instance's FLOP/s at MFU."""
    from agentsim.cluster.costmodel import RooflineCostModel

    cost = RooflineCostModel.from_scenario(scenario)
    computed = served.recomputed_tokens.to_numpy(dtype=float)
    cached = served.hit_tokens.to_numpy(dtype=float)
    flops = 2.0 * cost.active_params * computed + 2.0 * cost.attn_coeff * (computed * cached + computed * computed / 2.0)
    return float(flops.sum() / cost.flops_per_s)


def economics_summary(scenario, requests: pd.DataFrame, summary: dict,
                      prices: ProviderPrices = DEFAULT_PRICES) -> dict:
    """Economics keys for ``summary`` (needs its ``gpu_seconds``, ``gpu_busy_fraction``, ``simulated_s``).

    Returned keys (USD unless named otherwise): ``gpu_hours``, ``gpu_cost_usd``,
    ``cost_per_million_tokens_usd``, ``cost_per_million_input_tokens_usd``,
    ``cost_per_million_output_tokens_usd``, ``prefill_busy_share``, ``cache_ttl_s``,
    ``cache_read_tokens``, ``cache_write_tokens``, ``provider_cache_write_multiplier``,
    ``provider_bill_usd``, ``provider_bill_no_cache_usd``, ``provider_cache_savings_fraction``,
    ``provider_input_usd_per_million`` (effective input price after cache discounts),
    ``memory_cost_usd``, ``memory_cost_by_tier_usd``, ``memory_usd_per_hour``, ``memory_unpriced_tiers``,
    ``total_cost_usd``,
    ``cost_usd_per_hour``, ``total_cost_per_million_tokens_usd``.
    """
    served = rows_where(requests, ~requests.rejected.astype(bool)) if len(requests) else requests
    input_tokens = int(served.prompt_tokens.sum()) if len(served) else 0
    output_tokens = int(served.output_tokens.sum()) if len(served) else 0
    read_tokens = int(served.hit_tokens.sum()) if len(served) else 0
    write_tokens = int(served.recomputed_tokens.sum()) if len(served) else 0

    gpu_seconds = float(summary.get("gpu_seconds", 0.0))
    price_per_gpu_s = scenario.hardware.price_usd_per_gpu_hour / 3600.0
    gpu_cost = gpu_seconds * price_per_gpu_s
    busy_s = float(summary.get("gpu_busy_fraction", 0.0)) * float(summary.get("simulated_s", 0.0)) * scenario.hardware.instances
    prefill_s = _prefill_seconds(scenario, served) if len(served) else 0.0
    prefill_share = min(1.0, prefill_s / busy_s) if busy_s > 0 else (1.0 if output_tokens == 0 else 0.0)

    def per_million(cost: float, tokens: int) -> float:
        return cost / tokens * 1e6 if tokens else float("nan")

    simulated_s = float(summary.get("simulated_s", 0.0))
    deployment = summary.get("deployment") or {}
    memory = memory_cost(scenario, deployment.get("tiers", []), simulated_s)
    gpu_usd_per_hour = scenario.hardware.price_usd_per_gpu_hour * scenario.hardware.gpus_per_instance * scenario.hardware.instances
    total_cost = gpu_cost + memory["memory_cost_usd"]

    ttl_s = scenario_ttl_s(scenario)
    write_mult = prices.write_multiplier(ttl_s)
    input_price = prices.input_usd_per_million / 1e6
    input_bill = input_price * (prices.cache_read_multiplier * read_tokens + write_mult * write_tokens)
    output_bill = prices.output_usd_per_million / 1e6 * output_tokens
    no_cache_bill = input_price * input_tokens + output_bill
    bill = input_bill + output_bill
    return {
        "gpu_hours": gpu_seconds / 3600.0,
        "gpu_cost_usd": gpu_cost,
        "cost_per_million_tokens_usd": per_million(gpu_cost, input_tokens + output_tokens),
        "cost_per_million_input_tokens_usd": per_million(gpu_cost * prefill_share, input_tokens),
        "cost_per_million_output_tokens_usd": per_million(gpu_cost * (1.0 - prefill_share), output_tokens),
        "prefill_busy_share": prefill_share,
        **memory,
        "total_cost_usd": total_cost,
        "cost_usd_per_hour": gpu_usd_per_hour + memory["memory_usd_per_hour"],
        "total_cost_per_million_tokens_usd": per_million(total_cost, input_tokens + output_tokens),
        "cache_ttl_s": ttl_s,
        "cache_read_tokens": read_tokens,
        "cache_write_tokens": write_tokens,
        "provider_cache_write_multiplier": write_mult,
        "provider_bill_usd": bill,
        "provider_bill_no_cache_usd": no_cache_bill,
        "provider_cache_savings_fraction": 1.0 - bill / no_cache_bill if no_cache_bill > 0 else float("nan"),
        "provider_input_usd_per_million": per_million(input_bill, input_tokens) if input_tokens else float("nan"),
    }


def provider_bill_usd(read_tokens: np.ndarray | int, write_tokens: np.ndarray | int, output_tokens: np.ndarray | int,
                      ttl_s: float | None, prices: ProviderPrices = DEFAULT_PRICES) -> float:
    """The provider bill for given token counts and TTL (for what-ifs outside a run)."""
    input_price = prices.input_usd_per_million / 1e6
    return float(input_price * (prices.cache_read_multiplier * np.sum(read_tokens)
                                + prices.write_multiplier(ttl_s) * np.sum(write_tokens))
                 + prices.output_usd_per_million / 1e6 * np.sum(output_tokens))
