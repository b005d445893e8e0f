"""Warnings for runs that cannot do their job: valid input whose result would mislead.

Not errors (the scenario is well formed and the run is reproducible), but a run that rejects
every request, or a TTL policy whose TTL is longer than the whole run, answers no question
about the cache. :func:`scenario_warnings` is checked before the run, :func:`result_warnings`
after it; the CLI prints each as one ``warning:`` line on stderr.
"""

from __future__ import annotations


def _policy_refs(scenario):
    yield "cache.eviction", scenario.cache.eviction
    tiers = scenario.cache.tiers
    if tiers is not None:
        for name, tier in tiers.lower_tiers():
            yield f"cache.tiers.{name}.eviction", tier.eviction


def scenario_warnings(scenario) -> list[str]:
    """Problems visible before the run: a TTL that cannot fire within ``duration_s``."""
    from agentsim.cache.policies import EVICTION_POLICIES

    notes = []
    for path, ref in _policy_refs(scenario):
        policy = EVICTION_POLICIES.create(ref.name, ref.params)
        ttl_s = getattr(policy, "ttl_s", None)
        if isinstance(ttl_s, (int, float)) and ttl_s != float("inf") and ttl_s > scenario.duration_s:
            notes.append(f"{path}: the TTL of {ttl_s:g} s is longer than the run (duration_s {scenario.duration_s:g} s), "
                         f"so no block can expire while sessions arrive: the run measures {ref.name!r} as a plain "
                         "capacity policy (lengthen duration_s or shorten the TTL)")
    return notes


def result_warnings(summary: dict) -> list[str]:
    """Problems visible in the result: every measured request rejected, a TTL that never fired
    (``ttl_warning``, judged against the tier the TTL applies to)."""
    notes = []
    if summary.get("ttl_warning"):
        notes.append(str(summary["ttl_warning"]))
    requests = summary.get("requests") or 0
    if requests and summary.get("requests_rejected") == requests:
        notes.append(f"every one of the {requests:,} measured requests was rejected (none fit the KV capacity "
                     "with its prompt): latency and hit metrics are empty; raise hardware.kv_capacity_bytes or "
                     "shorten the prompts")
    return notes
