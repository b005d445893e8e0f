"""Check policy names and parameters in a validated scenario against the registries."""

from __future__ import annotations

from pydantic import ValidationError

from agentsim.config.yaml_paths import locate
from agentsim.errors import InputError, did_you_mean
from agentsim.hardware.tier_kinds import lower_tier_names


def check_registered(registry, name, params, name_path: tuple, params_path: tuple, source: str, lines: dict) -> None:
    """Raise InputError if ``name`` is not in ``registry`` or ``params`` do not validate for it;
    the message names the YAML line and path, and suggests the closest known parameter for an
    unknown one."""
    if name not in registry:
        raise InputError(registry.unknown_message(name), source, locate(lines, name_path))
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
        raise InputError(message, source, locate(lines, params_path + sub)) from None
    except ValueError as exc:
        raise InputError(str(exc), source, locate(lines, params_path)) from None


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
                                 source, locate(lines, ("cache", "tiers", name)))
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
            raise InputError(message, source, locate(lines, path))
    serving = scenario.serving
    check_registered(ROUTERS, serving.router, serving.router_params, ("serving", "router"),
                     ("serving", "router_params"), source, lines)
    disaggregation = serving.disaggregation
    if disaggregation is not None and disaggregation.decode_router is not None:
        check_registered(ROUTERS, disaggregation.decode_router, disaggregation.decode_router_params,
                         ("serving", "disaggregation", "decode_router"),
                         ("serving", "disaggregation", "decode_router_params"), source, lines)

    from agentsim.engine.prefill_ahead import PREFILL_AHEAD

    ref = serving.prefill_ahead
    check_registered(PREFILL_AHEAD, ref.name, ref.params, ("serving", "prefill_ahead", "name"),
                     ("serving", "prefill_ahead", "params"), source, lines)


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
                source, locate(lines, path))
