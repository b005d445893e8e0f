"""Cross-field and hardware-dependent checks of ``cache.tiers``, run at load time by
:mod:`agentsim.engine.checks` (they need the hardware, the model and the tier kinds, so they
cannot live in ``config/``)."""

from __future__ import annotations

from agentsim.errors import did_you_mean
from agentsim.hardware.tier_kinds import TIER_KINDS, host_tier, link_endpoints, lower_tier_names, tier_names
from agentsim.hardware.topology import Topology, place, place_pools, tier_capacity_bytes


def _placed(scenario) -> list[tuple[object, object]]:
    """(the scenario as the instance's pool sees it, placement) of every instance: the
    disaggregated pools' workers, or ``hardware.instances``."""
    hw = scenario.hardware
    if scenario.serving.disaggregation is None:
        return [(scenario, p) for p in place(hw.instances, hw.gpus_per_instance, hw.gpus_per_tray,
                                             hw.nvlink_domain_gpus, hw.racks)]
    from agentsim.config.disaggregation import pool_scenario

    pools = [pool_scenario(scenario, role) for role in ("prefill", "decode")]
    placed = place_pools([(pool.hardware.instances, pool.hardware.gpus_per_instance) for pool in pools],
                         hw.gpus_per_tray, hw.nvlink_domain_gpus, hw.racks)
    return [(pool, p) for pool, at in zip(pools, placed) for p in at]


def _hardware_capacity_bytes(name: str, cfg, shape: Topology, placed) -> float:
    """The most a ``name`` tier can hold per instance on this hardware (the kind's capacity rule
    with the whole device, ``capacity_fraction`` 1), the smallest over instances. A tray-scoped
    kind counts every tray an instance spans."""
    whole = cfg.model_copy(update={"capacity_bytes": None, "capacity_fraction": 1.0})
    physical = []
    for view, p in placed:
        bytes_ = tier_capacity_bytes(view, name, whole, shape, p.instance)
        if TIER_KINDS[name].capacity_scope == "tray":
            hw = view.hardware
            bytes_ *= -(-hw.gpus_per_instance // hw.gpus_per_tray)  # an instance may span trays
        physical.append(bytes_)
    return min(physical)


def tiers_config_problem(scenario) -> tuple[str, tuple] | None:
    """The first mistake in ``cache.tiers`` that pydantic cannot see alone (it needs the
    hardware, the model or several fields together), as (message, YAML path); None if fine.
    The scenario loader turns it into an InputError with the file and line."""
    tiers = scenario.cache.tiers
    if tiers is None:
        return None
    base = ("cache", "tiers")
    lower_names = lower_tier_names()
    hw = scenario.hardware
    if tiers.order is not None:
        order = list(tiers.order)
        shown = "[" + ", ".join(order) + "]"
        for index, name in enumerate(order):
            if order.index(name) != index:
                return f"tier {name!r} is listed twice in order {shown}", base + ("order", index)
            if getattr(tiers, name, None) is None:
                return f"order {shown} names tier {name!r}, which is not configured under cache.tiers", base + ("order", index)
        for name, cfg in tiers.lower_tiers():
            if cfg.enabled and name not in order:
                return f"tier {name!r} is configured but missing from order {shown}", base + ("order",)
        # Hits of the kinds staged through host memory go through the host tier: it comes first.
        host = host_tier([n for n in order if getattr(tiers, n).enabled])
        if host is not None and order[0] != host and any(TIER_KINDS[n].stages_through for n in order if n in TIER_KINDS):
            staged = " and ".join(n for n in lower_names if TIER_KINDS[n].stages_through)
            return (f"tiers in the wrong order {shown}: {host} must be the first tier below HBM "
                    f"({staged} hits are staged through {host.upper()}); e.g. [{host}, {order[0]}]"), base + ("order",)
    block_bytes = scenario.cache.block_tokens * scenario.model.kv_bytes_per_token
    placed = _placed(scenario)
    shape = Topology([p for _, p in placed], [])
    own_links = " and ".join(n for n in lower_names if TIER_KINDS[n].tier_link_fields)
    for name, cfg in tiers.enabled_tiers():
        kind = TIER_KINDS[name]
        if not kind.tier_link_fields:
            for key in ("bandwidth_bytes_per_s", "latency_s"):
                if getattr(cfg, key) is not None:
                    return (f"{key} applies to the {own_links} tier only; set the {name} tier's links with "
                            f"cache.tiers.links or the hardware section"), base + (name, key)
        if cfg.shared and not kind.shareable:
            shareable = " and ".join(n for n in lower_names if TIER_KINDS[n].shareable)
            return f"shared applies to the {shareable} tier only, not {name}", base + (name, "shared")
        if kind.capacity_bytes is None and cfg.capacity_bytes is None:
            return (f"the {name} tier needs capacity_bytes ({kind.capacity_note})"), base + (name, "capacity_bytes")
        problem = kind.hardware_problem(hw)
        if problem is not None:
            return problem, base + (name,)
        capacity = min(tier_capacity_bytes(view, name, cfg, shape, p.instance) for view, p in placed)
        if capacity < block_bytes:
            key = "capacity_bytes" if cfg.capacity_bytes is not None else "capacity_fraction"
            return (f"the {name} tier holds less than one KV block per instance ({capacity / 1e6:.3g} MB < "
                    f"{block_bytes / 1e6:.3g} MB)"), base + (name, key)
        if capacity / block_bytes > scenario.limits.max_blocks_per_tier:
            key = "capacity_bytes" if cfg.capacity_bytes is not None else "capacity_fraction"
            return (f"the {name} tier's {capacity / block_bytes:.3g} KV blocks per instance exceed the limit of "
                    f"{scenario.limits.max_blocks_per_tier:,} blocks per tier; raise limits.max_blocks_per_tier in the "
                    "scenario if this is intended"), base + (name, key)
        if cfg.capacity_bytes is not None and kind.capacity_bytes is not None:
            # A capacity the hardware does not have would simulate memory that is not there.
            physical = _hardware_capacity_bytes(name, cfg, shape, placed)
            if cfg.capacity_bytes > physical:
                return (f"the {name} tier's {cfg.capacity_bytes / 1e12:.4g} TB per instance exceed what the hardware "
                        f"has for it ({physical / 1e12:.4g} TB per instance: {kind.description}); lower "
                        "capacity_bytes or change the hardware section"), base + (name, "capacity_bytes")
    enabled = [name for name, _ in tiers.enabled_tiers()]
    if tiers.prefetch.policy != "none" and (len(enabled) < 2 or enabled[0] != host_tier(enabled)):
        hosts = " or ".join(name for name in lower_names if TIER_KINDS[name].host)
        return (f"prefetch policy {tiers.prefetch.policy!r} stages disk/remote hits into the host tier: it needs an "
                f"enabled {hosts} tier and a tier below it (enabled: {', '.join(enabled) or 'none'})"), base + ("prefetch", "policy")
    if tiers.on_tool_call == "demote" and not enabled:
        return "on_tool_call: demote needs an enabled tier below HBM to demote to", base + ("on_tool_call",)
    if tiers.prefetch_before_return and not enabled:
        return "prefetch_before_return needs an enabled tier below HBM", base + ("prefetch_before_return",)
    endpoints = link_endpoints()
    names = tier_names()
    known = ", ".join(f"{a}->{b}" for a, b in endpoints)
    for index, link in enumerate(tiers.links):
        for key, name in (("from", link.from_tier), ("to", link.to_tier)):
            if name not in names:
                return (f"a link joins unknown tier {name!r}{did_you_mean(name, names)}; tiers: {', '.join(names)}",
                        base + ("links", index, key))
            if name in lower_names and getattr(tiers, name, None) is None:
                return f"a link joins tier {name!r}, which is not configured under cache.tiers", base + ("links", index, key)
            if name == "peer_hbm" and not tiers.peer_hbm:
                return "a link joins peer_hbm, but cache.tiers.peer_hbm is false", base + ("links", index, key)
        if (link.from_tier, link.to_tier) not in endpoints:
            return f"no link goes from {link.from_tier} to {link.to_tier}; links: {known}", base + ("links", index)
        if link.bandwidth_bytes_per_s is None and link.latency_s is None:
            return "a link override needs bandwidth_bytes_per_s or latency_s", base + ("links", index)
    return None
