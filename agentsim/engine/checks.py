"""Check policy names and parameters in a validated scenario against the registries."""

from __future__ import annotations

from pydantic import ValidationError

from agentsim.config.yaml_paths import blame
from agentsim.errors import InputError, did_you_mean
from agentsim.hardware.tier_kinds import lower_tier_names


def check_registered(registry, name, params, name_path: tuple, params_path: tuple, source: str, lines: dict) -> None:
    """Raise InputError if ``name`` is not in ``registry`` or ``params`` do not validate for it;
    the message names the YAML line and path, and suggests the closest known parameter for an
    unknown one."""
    if name not in registry:
        raise InputError(registry.unknown_message(name), *blame(lines, source, name_path))
    try:
        registry.validate_params(name, params)
    except ValidationError as exc:
        error = exc.errors()[0]
        sub = tuple(error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            model = registry.params_model(name)
            hint = did_you_mean(sub[-1], model.model_fields, cutoff=0.5) if model else ""
            message = f"unknown parameter {sub[-1]!r} for {registry.kind} {name!r}{hint}"
        raise InputError(message, *blame(lines, source, params_path + sub)) from None
    except ValueError as exc:
        raise InputError(str(exc), *blame(lines, source, params_path)) from None


def check_policy_ref(ref, path: tuple, source: str, lines: dict) -> None:
    """Raise InputError if the eviction policy ``ref.name`` is unknown or ``ref.params`` do not validate."""
    from agentsim.cache.policies import EVICTION_POLICIES

    check_registered(EVICTION_POLICIES, ref.name, ref.params, path + ("name",), path + ("params",), source, lines)


def check_policies(scenario, source: str, lines: dict) -> None:
    check_policy_ref(scenario.cache.eviction, ("cache", "eviction"), source, lines)
    from agentsim.cache.policies.admission import ADMISSION_FILTERS

    ref = scenario.cache.admission
    check_registered(ADMISSION_FILTERS, ref.name, ref.params, ("cache", "admission", "name"),
                     ("cache", "admission", "params"), source, lines)
    tiers = scenario.cache.tiers
    if (ref.name != "admit_all" or ref.params) and tiers is not None and tiers.active():
        # Checked here, with the file and line, not when the engine is built.
        raise InputError(f"cache.admission {ref.name!r} applies to the HBM-only cache; this scenario enables "
                         "cache.tiers (not supported yet): remove one of them", *blame(lines, source, ("cache", "admission")))


def check_components(scenario, source: str, lines: dict) -> None:
    """Every other registered name in a scenario: tier eviction policies, the load rule, the router
    (so a typo fails at load time with its line, not as a KeyError deep in a run)."""
    from agentsim.cluster.serving.load_rules import LOAD_RULES
    from agentsim.cluster.routers import ROUTERS

    tiers = scenario.cache.tiers
    if tiers is not None:
        kinds = lower_tier_names()
        for name in tiers.extra_tier_names():
            if name not in kinds:
                raise InputError(f"unknown tier {name!r}{did_you_mean(name, kinds)}; tier kinds: {', '.join(kinds)}",
                                 *blame(lines, source, ("cache", "tiers", name)))
        for name, tier in tiers.lower_tiers():
            check_policy_ref(tier.eviction, ("cache", "tiers", name, "eviction"), source, lines)
        check_no_orphans_in_tiers(scenario, source, lines)
        rule = tiers.load_rule
        check_registered(LOAD_RULES, rule.name, rule.params, ("cache", "tiers", "load_rule", "name"),
                         ("cache", "tiers", "load_rule", "params"), source, lines)
        # Cross-field and hardware-dependent tier mistakes (order, links, capacities, prefetch).
        from agentsim.engine.tier_checks import tiers_config_problem

        problem = tiers_config_problem(scenario)
        if problem is not None:
            message, path = problem
            raise InputError(message, *blame(lines, source, path))
    serving = scenario.serving
    check_registered(ROUTERS, serving.router, serving.router_params, ("serving", "router"),
                     ("serving", "router_params"), source, lines)
    disaggregation = serving.disaggregation
    if disaggregation is not None and disaggregation.decode_router is not None:
        check_registered(ROUTERS, disaggregation.decode_router, disaggregation.decode_router_params,
                         ("serving", "disaggregation", "decode_router"),
                         ("serving", "disaggregation", "decode_router_params"), source, lines)
    if disaggregation is not None and scenario.hardware.racks > 1:
        problem = pools_racks_problem(scenario)
        if problem is not None:
            raise InputError(problem, *blame(lines, source, ("hardware", "racks")))

    from agentsim.engine.prefill_ahead import PREFILL_AHEAD

    ref = serving.prefill_ahead
    check_registered(PREFILL_AHEAD, ref.name, ref.params, ("serving", "prefill_ahead", "name"),
                     ("serving", "prefill_ahead", "params"), source, lines)


def pools_racks_problem(scenario) -> str | None:
    """Disaggregated pools spread over several racks must fit each rack's NVLink domain (a rack
    is one domain): the message if a rack's share does not, else None."""
    from agentsim.config.disaggregation import pool_scenario
    from agentsim.hardware.topology import rack_extents_gpus

    hw = scenario.hardware
    shapes = [(pool.hardware.instances, pool.hardware.gpus_per_instance)
              for pool in (pool_scenario(scenario, role) for role in ("prefill", "decode"))]
    extents = rack_extents_gpus(shapes, hw.nvlink_domain_gpus, hw.racks)
    if max(extents) > hw.nvlink_domain_gpus:
        (p_workers, p_gpus), (d_workers, d_gpus) = shapes
        return (f"{p_workers} prefill workers of {p_gpus} GPUs and {d_workers} decode workers of {d_gpus} GPUs, "
                f"spread over {hw.racks} racks, need {max(extents)} GPUs in the fullest rack, more than its "
                f"NVLink domain of {hw.nvlink_domain_gpus} GPUs")
    return None


def check_no_orphans_in_tiers(scenario, source: str, lines: dict) -> None:
    """A tiered cache keeps each tier's copies prefix-closed, so a policy that evicts runs with
    resident descendants (``tree_mode: flat``, vLLM's block pool) cannot manage any of its
    tiers: refuse it at load time rather than fail an invariant mid-run."""
    from agentsim.cache.policies import EVICTION_POLICIES

    refs = [(scenario.cache.eviction, ("cache", "eviction"))]
    for name, tier in scenario.cache.tiers.lower_tiers():
        refs.append((tier.eviction, ("cache", "tiers", name, "eviction")))
    for ref, path in refs:
        policy = EVICTION_POLICIES.create(ref.name, ref.params)
        if policy.allows_orphans:
            raise InputError(
                f"policy {ref.name!r} in tree_mode 'flat' evicts runs whose descendants stay resident, "
                "which a tiered cache does not model (each tier keeps its copies prefix-closed); "
                "set params: {tree_mode: leaf_only} (or cascade) for this tier",
                *blame(lines, source, path))
