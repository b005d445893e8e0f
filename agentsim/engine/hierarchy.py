"""The memory hierarchy of one simulation: builds each instance's tiered cache and links (from
the topology of :mod:`agentsim.hardware.topology`) and reports per-tier, per-link results.
Used by the composition root (:mod:`agentsim.engine.simulation`)."""

from __future__ import annotations

import simpy

from agentsim.hardware.links import link_rows
from agentsim.hardware.tier_kinds import host_tier, tier_names
from agentsim.hardware.topology import build_topology, tier_capacity_bytes
from agentsim.metrics.summary import rows_where, ttft_part_summary


class Hierarchy:
    """Builds and reports the memory hierarchy of a simulation (used by the composition root).

    Present only when ``cache.tiers`` enables a lower tier or peer-HBM hits; without it the
    instances keep the plain single-tier :class:`~agentsim.cache.radix.RadixCache`.
    """

    def __init__(self, env: simpy.Environment, scenario, placements=None):
        """``placements``: the disaggregated workers' (prefill then decode, numbered across both
        pools: :func:`~agentsim.hardware.topology.place_pools`); absent, the instances'."""
        from agentsim.cluster.serving.load_rules import LOAD_RULES

        self.env = env
        self.scenario = scenario
        self.config = scenario.cache.tiers
        self.topology = build_topology(env, scenario, placements)
        self.block_bytes = scenario.cache.block_tokens * scenario.model.kv_bytes_per_token
        rule = self.config.load_rule
        self.load_rule_cls = LOAD_RULES.get(rule.name)
        self.caches = []
        self.instances = []

    def make_cache(self, instance: int, hbm_capacity_blocks: int, hardware_scenario=None):
        """The tiered cache of ``instance`` (its index in the placements). ``hardware_scenario``:
        the scenario as this instance's pool sees it (its GPUs size the DRAM share), if not the
        scenario itself."""
        from agentsim.cache.tiers import TieredCache, TierSpec
        from agentsim.engine.policy_factory import eviction_policy

        def policy(ref):
            return eviction_policy(ref, self.scenario)

        sized_by = hardware_scenario if hardware_scenario is not None else self.scenario
        lower = []
        enabled = self.config.enabled_tiers()
        host = host_tier([name for name, _ in enabled])
        for name, cfg in enabled:
            capacity = int(tier_capacity_bytes(sized_by, name, cfg, self.topology, instance) // self.block_bytes)
            lower.append(TierSpec(name, max(1, capacity), policy(cfg.eviction), cfg.write_policy,
                                  cfg.write_through_hits, cfg.inclusive, host=name == host))
        cache = TieredCache(hbm_capacity_blocks, policy(self.scenario.cache.eviction), lower, name="hbm")
        self.caches.append(cache)
        return cache

    def instance_kwargs(self, instance: int) -> dict:
        return {"links": self.topology.links[instance], "load_rule": self.load_rule_cls(),
                "overlap_layers": self.config.overlap_layers, "tiers_config": self.config}

    def connect_peers(self, instances) -> None:
        self.instances = list(instances)
        remote = self.config.remote
        if remote is not None and remote.enabled and remote.shared:
            # One store: every instance reads every other instance's share of it.
            for inst in instances:
                inst.store_tier = inst.cache.tier_index("remote")
                inst.store_peers = [other for other in instances if other is not inst]
        if not self.config.peer_hbm:
            return
        topology = self.topology
        for inst in instances:
            me = inst.instance_id
            inst.peers = [instances[i] for i in topology.peers(me)]
            inst.peer_links = {i: topology.peer_load_links(me, i) for i in topology.peers(me)}

    # --- metrics ---------------------------------------------------------------------------
    def occupancy(self, instance) -> list[tuple[str, int, int, int]]:
        """(tier, used blocks, capacity blocks, pinned/reserved blocks) of one instance's tiers."""
        return [(t.name, t.used_blocks, t.capacity_blocks, t.reserved_blocks) for t in instance.cache.tiers[1:]]

    def link_rows(self, elapsed_s: float) -> list[dict]:
        """The link table's rows (:func:`agentsim.hardware.links.link_rows`), links by name."""
        links = self.topology.all_links
        return link_rows([links[name] for name in sorted(links)], elapsed_s)

    def state_summary(self, elapsed_s: float) -> dict:
        """The run summary's tier keys that follow :func:`request_summary`'s, all counted by the
        tiers, instances and links: per-tier blocks, prefetch and tool-gap moves, per-link and
        per-link-kind traffic (no request needed, so a run reads them before it lets go of its
        caches)."""
        out: dict = {}
        tiers: dict = {}
        for cache in self.caches:
            for tier in cache.tiers:
                entry = tiers.setdefault(tier.name, {"capacity_blocks": 0, "used_blocks": 0, "inserted_blocks": 0,
                                                     "evicted_blocks": 0, "loaded_blocks": 0})
                entry["capacity_blocks"] += tier.capacity_blocks
                entry["used_blocks"] += tier.used_blocks
                entry["inserted_blocks"] += tier.inserted_blocks
                entry["evicted_blocks"] += tier.evicted_blocks
                entry["loaded_blocks"] += cache.loaded_blocks[tier.index]
        out["tiers"] = tiers
        out["dropped_blocks"] = sum(c.dropped_blocks for c in self.caches)
        # Prefetch (HiCache stop rules) and tool-gap movement counters, summed over instances.
        moves: dict = {}
        for inst in self.instances:
            for key, value in inst.tier_stats.items():
                moves[key] = moves.get(key, 0) + value
        out["prefetch_policy"] = self.config.prefetch.policy
        out["on_tool_call"] = self.config.on_tool_call
        out["prefetch_before_return"] = self.config.prefetch_before_return
        out.update({key: moves[key] for key in sorted(moves)})
        links = {}
        for name in sorted(self.topology.all_links):
            links[name] = self.topology.all_links[name].stats(elapsed_s)
        out["links"] = links
        by_kind: dict = {}
        for stats in links.values():
            kind = by_kind.setdefault(stats["kind"], {"bytes": 0.0, "busy_s": 0.0, "links": 0, "max_utilisation": 0.0})
            kind["bytes"] += stats["bytes"]
            kind["busy_s"] += stats["busy_s"]
            kind["links"] += 1
            kind["max_utilisation"] = max(kind["max_utilisation"], stats["utilisation"])
        for kind in by_kind.values():
            kind["mean_utilisation"] = kind["busy_s"] / (kind["links"] * elapsed_s) if elapsed_s > 0 else 0.0
        out["link_kinds"] = by_kind
        for kind, stats in by_kind.items():
            out[f"link_{kind}_bytes"] = stats["bytes"]
            out[f"link_{kind}_max_utilisation"] = stats["max_utilisation"]
        return out


def request_summary(requests) -> dict:
    """Hit tokens per tier and TTFT's parts (queue, load, prefill) over the served rows of
    ``requests`` (a request table, or a selection of one)."""
    out: dict = {}
    done = rows_where(requests, ~requests.rejected) if len(requests) else requests
    prompt = float(done.prompt_tokens.sum()) if len(done) else 0.0
    hits = {name: int(done[f"hit_tokens_{name}"].sum()) if len(done) else 0 for name in tier_names()}
    out["hit_tokens_by_tier"] = hits
    out["hit_ratio_by_tier"] = {name: (value / prompt if prompt else float("nan")) for name, value in hits.items()}
    for name in tier_names():
        out[f"hit_ratio_{name}"] = out["hit_ratio_by_tier"][name]
    out.update(ttft_part_summary(done, ("queue_wait", "load_wait", "prefill")))
    out["loaded_bytes"] = float(done.loaded_bytes.sum()) if len(done) else 0.0
    return out


def load_breakdown(request) -> tuple[float, float]:
    """(load_wait_s, prefill_s) of a finished request, with TTFT = queue + load + prefill.

    Load wait is the part of the load the request waited for: from admission to the load's end
    when prefill waits for it; with layer-by-layer overlap, only the time the first token waited
    after the prefill compute. HBM-only requests have no load wait.
    """
    if request.rejected:
        return float("nan"), float("nan")
    ttft_after_queue = request.first_token_s - request.admitted_s
    done = request.load_done_s
    if done != done:  # no load
        return 0.0, ttft_after_queue
    load_wait = min(ttft_after_queue, max(0.0, done - request.admitted_s))
    return load_wait, ttft_after_queue - load_wait
