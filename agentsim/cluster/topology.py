"""The cluster's shape: instances grouped by tray and NVLink domain, and the links between tiers.

* An instance is ``gpus_per_instance`` consecutive GPUs; GPUs are numbered tray by tray
  (``gpus_per_tray``) and domain by domain (``nvlink_domain_gpus``, 72 on an NVL72 rack).
* NVLink-C2C host<->device links are per GPU, so an instance's ``h2d``/``d2h`` links carry
  ``gpus_per_instance`` times the per-GPU bandwidth (KV is assumed sharded over the instance's
  GPUs, as with DP-attention or TP-sharded GQA). The per-GPU figure already accounts for two
  GPUs sharing one Grace CPU's LPDDR bandwidth (hardware reference, section 5).
* Host DRAM belongs to the Grace CPUs: each instance gets its GPUs' share of it.
* The NVMe drives of a tray are shared by the tray's instances: one read and one write link per
  tray (drives x per-drive bandwidth), capacity split evenly between the tray's instances.
* Each instance has a NIC link (GPUs x per-GPU NIC bandwidth) to the optional remote store,
  which also has one shared link (its aggregate bandwidth) for all instances.
* Peer-HBM loads come over the receiving instance's NVLink ingress link.

Loads: DRAM -> HBM over ``h2d``; disk -> DRAM -> HBM over the tray's NVMe read link then
``h2d`` (staging through DRAM); remote -> DRAM -> HBM over the store link, the NIC, then ``h2d``.
Copies down: HBM -> DRAM over ``d2h``; DRAM -> disk over the NVMe write link; to remote over the
NIC and the store link.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import simpy

from agentsim.cluster.links import Link
from agentsim.errors import did_you_mean


@dataclass
class InstanceLinks:
    """The links one instance's transfers use (some shared with other instances)."""

    h2d: Link
    d2h: Link
    nvlink_in: Link
    nic: Link
    nvme_read: Link | None = None
    nvme_write: Link | None = None
    store: Link | None = None

    def load_path(self, tier_name: str) -> list[Link]:
        """Links crossed, in order, to bring a block from ``tier_name`` into HBM."""
        if tier_name == "dram":
            return [self.h2d]
        if tier_name == "disk":
            return [self.nvme_read, self.h2d]
        if tier_name == "remote":
            return [link for link in (self.store, self.nic, self.h2d) if link is not None]
        if tier_name == "peer_hbm":
            return [self.nvlink_in]
        raise ValueError(f"no load path from tier {tier_name!r}")

    def write_link(self, src: str, dst: str) -> Link | None:
        """The bottleneck link of a copy down from ``src`` to ``dst``."""
        if dst == "dram":
            return self.d2h
        if dst == "disk":
            return self.nvme_write
        if dst == "remote":
            return self.store if self.store is not None else self.nic
        return None


@dataclass
class Placement:
    instance: int
    first_gpu: int
    tray: int
    domain: int


@dataclass
class Topology:
    """Placement of instances and every link, built once per simulation."""

    placements: list[Placement]
    links: list[InstanceLinks]
    all_links: dict[str, Link] = field(default_factory=dict)

    def peers(self, instance: int) -> list[int]:
        """Other instances in the same NVLink domain."""
        domain = self.placements[instance].domain
        return [p.instance for p in self.placements if p.domain == domain and p.instance != instance]

    def instances_in_tray(self, tray: int) -> int:
        return sum(1 for p in self.placements if p.tray == tray)


def place(n_instances: int, gpus_per_instance: int, gpus_per_tray: int, domain_gpus: int) -> list[Placement]:
    out = []
    for index in range(n_instances):
        first = index * gpus_per_instance
        out.append(Placement(index, first, first // gpus_per_tray, first // domain_gpus))
    return out


#: ``cache.tiers.links`` endpoints -> the link they name (see :class:`InstanceLinks`).
LINK_BY_ENDPOINTS = {("dram", "hbm"): "h2d", ("hbm", "dram"): "d2h", ("disk", "dram"): "nvme_read",
                     ("dram", "disk"): "nvme_write", ("remote", "dram"): "store", ("dram", "remote"): "store",
                     ("peer_hbm", "hbm"): "nvlink_in"}


def link_overrides(tiers) -> dict[str, tuple[float | None, float | None]]:
    """{link role: (bandwidth, latency)} from ``cache.tiers.links`` (links to disabled tiers skipped)."""
    out: dict[str, tuple[float | None, float | None]] = {}
    if tiers is None:
        return out
    for link in tiers.links:
        ends = (link.from_tier, link.to_tier)
        if any(getattr(tiers, end, None) is not None and not getattr(tiers, end).enabled for end in ends):
            continue
        role = LINK_BY_ENDPOINTS[ends]
        bw, lat = out.get(role, (None, None))
        out[role] = (link.bandwidth_bytes_per_s if link.bandwidth_bytes_per_s is not None else bw,
                     link.latency_s if link.latency_s is not None else lat)
    return out


def build_topology(env: simpy.Environment, scenario) -> Topology:
    hw = scenario.hardware
    g = hw.gpus_per_instance
    placements = place(hw.instances, g, hw.gpus_per_tray, hw.nvlink_domain_gpus)
    tiers = scenario.cache.tiers
    remote_cfg = tiers.remote if tiers is not None and tiers.remote is not None and tiers.remote.enabled else None
    overrides = link_overrides(tiers)
    all_links: dict[str, Link] = {}

    def add(link: Link) -> Link:
        all_links[link.name] = link
        return link

    def make(role: str, name: str, bandwidth: float, latency: float, kind: str) -> Link:
        bw, lat = overrides.get(role, (None, None))
        return add(Link(env, name, bw if bw is not None else bandwidth, lat if lat is not None else latency, kind))

    store = None
    if remote_cfg is not None:
        store = make("store", "remote_store", remote_cfg.bandwidth_bytes_per_s or 400e9,
                     remote_cfg.latency_s if remote_cfg.latency_s is not None else hw.rdma_latency_s, "network")
    trays: dict[int, tuple[Link, Link]] = {}
    links = []
    for p in placements:
        if p.tray not in trays and hw.nvme_drives_per_tray > 0:
            drives = hw.nvme_drives_per_tray
            trays[p.tray] = (
                make("nvme_read", f"tray{p.tray}.nvme_read", drives * hw.nvme_read_bytes_per_s_per_drive, hw.nvme_latency_s, "nvme"),
                make("nvme_write", f"tray{p.tray}.nvme_write", drives * hw.nvme_write_bytes_per_s_per_drive, hw.nvme_latency_s, "nvme"),
            )
        nvme = trays.get(p.tray, (None, None))
        i = p.instance
        links.append(InstanceLinks(
            h2d=make("h2d", f"inst{i}.c2c_h2d", g * hw.h2d_bytes_per_s, hw.transfer_setup_s, "nvlink_c2c"),
            d2h=make("d2h", f"inst{i}.c2c_d2h", g * hw.d2h_bytes_per_s, hw.transfer_setup_s, "nvlink_c2c"),
            nvlink_in=make("nvlink_in", f"inst{i}.nvlink_in", g * hw.nvlink_bytes_per_s, hw.nvlink_latency_s, "nvlink"),
            nic=add(Link(env, f"inst{i}.nic", g * hw.nic_bytes_per_s, hw.rdma_latency_s, "network")),
            nvme_read=nvme[0], nvme_write=nvme[1], store=store,
        ))
    return Topology(placements, links, all_links)


def tier_capacity_bytes(scenario, name: str, tier_cfg, topology: Topology, instance: int) -> float:
    """Capacity of lower tier ``name`` for one instance: given, or its share of the hardware."""
    if tier_cfg.capacity_bytes is not None:
        return tier_cfg.capacity_bytes
    hw = scenario.hardware
    if name == "dram":
        return hw.dram_bytes_per_gpu * hw.gpus_per_instance * tier_cfg.capacity_fraction
    if name == "disk":
        tray = topology.placements[instance].tray
        tray_bytes = hw.nvme_drives_per_tray * hw.nvme_bytes_per_drive
        return tray_bytes * tier_cfg.capacity_fraction / max(1, topology.instances_in_tray(tray))
    raise ValueError(f"tier {name!r} needs capacity_bytes")


TIER_NAMES = ("hbm", "peer_hbm", "dram", "disk", "remote")
LOWER_TIERS = ("dram", "disk", "remote")


def tiers_config_problem(scenario) -> tuple[str, tuple] | None:
    """The first mistake in ``cache.tiers`` that pydantic cannot see alone (it needs the
    hardware, the model or several fields together), as (message, YAML path); None if fine.
    The scenario loader turns it into an InputError with the file and line."""
    tiers = scenario.cache.tiers
    if tiers is None:
        return None
    base = ("cache", "tiers")
    hw = scenario.hardware
    if tiers.order is not None:
        order = list(tiers.order)
        shown = "[" + ", ".join(order) + "]"
        for index, name in enumerate(order):
            if order.index(name) != index:
                return f"tier {name!r} is listed twice in order {shown}", base + ("order", index)
            if getattr(tiers, name) is None:
                return f"order {shown} names tier {name!r}, which is not configured under cache.tiers", base + ("order", index)
        for name in LOWER_TIERS:
            cfg = getattr(tiers, name)
            if cfg is not None and cfg.enabled and name not in order:
                return f"tier {name!r} is configured but missing from order {shown}", base + ("order",)
        if "dram" in order and order[0] != "dram":
            return (f"tiers in the wrong order {shown}: dram must be the first tier below HBM "
                    f"(disk and remote hits are staged through DRAM); e.g. [dram, {order[0]}]"), base + ("order",)
    block_bytes = scenario.cache.block_tokens * scenario.model.kv_bytes_per_token
    placements = place(hw.instances, hw.gpus_per_instance, hw.gpus_per_tray, hw.nvlink_domain_gpus)
    shape = Topology(placements, [])
    for name, cfg in tiers.enabled_tiers():
        if name != "remote":
            for key in ("bandwidth_bytes_per_s", "latency_s"):
                if getattr(cfg, key) is not None:
                    return (f"{key} applies to the remote tier only; set the {name} tier's links with "
                            f"cache.tiers.links or the hardware section"), base + (name, key)
        if name == "remote" and cfg.capacity_bytes is None:
            return ("the remote tier needs capacity_bytes (a remote store's size is not part of the hardware "
                    "profile)"), base + (name, "capacity_bytes")
        if name == "disk" and hw.nvme_drives_per_tray == 0:
            return "a disk tier needs local NVMe drives, but hardware.nvme_drives_per_tray is 0", base + (name,)
        capacity = min(tier_capacity_bytes(scenario, name, cfg, shape, p.instance) for p in placements)
        if capacity < block_bytes:
            key = "capacity_bytes" if cfg.capacity_bytes is not None else "capacity_fraction"
            return (f"the {name} tier holds less than one KV block per instance ({capacity / 1e6:.3g} MB < "
                    f"{block_bytes / 1e6:.3g} MB)"), base + (name, key)
        if name in ("dram", "disk") and cfg.capacity_bytes is not None:
            # A capacity the hardware does not have would simulate memory that is not there.
            whole = cfg.model_copy(update={"capacity_bytes": None, "capacity_fraction": 1.0})
            trays = -(-hw.gpus_per_instance // hw.gpus_per_tray)  # an instance may span trays
            physical = min(tier_capacity_bytes(scenario, name, whole, shape, p.instance) for p in placements)
            physical *= trays if name == "disk" else 1
            if cfg.capacity_bytes > physical:
                what = "host DRAM" if name == "dram" else "local NVMe"
                return (f"the {name} tier's {cfg.capacity_bytes / 1e12:.4g} TB per instance exceed the hardware's "
                        f"{what} ({physical / 1e12:.4g} TB per instance); lower capacity_bytes or change the "
                        "hardware section"), base + (name, "capacity_bytes")
    enabled = [name for name, _ in tiers.enabled_tiers()]
    if tiers.prefetch.policy != "none" and (len(enabled) < 2 or enabled[0] != "dram"):
        return (f"prefetch policy {tiers.prefetch.policy!r} stages disk/remote hits into DRAM: it needs an enabled "
                f"dram tier and a tier below it (enabled: {', '.join(enabled) or 'none'})"), base + ("prefetch", "policy")
    if tiers.on_tool_call == "demote" and not enabled:
        return "on_tool_call: demote needs an enabled tier below HBM to demote to", base + ("on_tool_call",)
    if tiers.prefetch_before_return and not enabled:
        return "prefetch_before_return needs an enabled tier below HBM", base + ("prefetch_before_return",)
    known = ", ".join(f"{a}->{b}" for a, b in LINK_BY_ENDPOINTS)
    for index, link in enumerate(tiers.links):
        for key, name in (("from", link.from_tier), ("to", link.to_tier)):
            if name not in TIER_NAMES:
                return (f"a link joins unknown tier {name!r}{did_you_mean(name, TIER_NAMES)}; tiers: {', '.join(TIER_NAMES)}",
                        base + ("links", index, key))
            if name in LOWER_TIERS and getattr(tiers, name) is None:
                return f"a link joins tier {name!r}, which is not configured under cache.tiers", base + ("links", index, key)
            if name == "peer_hbm" and not tiers.peer_hbm:
                return "a link joins peer_hbm, but cache.tiers.peer_hbm is false", base + ("links", index, key)
        if (link.from_tier, link.to_tier) not in LINK_BY_ENDPOINTS:
            return f"no link goes from {link.from_tier} to {link.to_tier}; links: {known}", base + ("links", index)
        if link.bandwidth_bytes_per_s is None and link.latency_s is None:
            return "a link override needs bandwidth_bytes_per_s or latency_s", base + ("links", index)
    return None


class Hierarchy:
    """Builds and reports the memory hierarchy of a simulation (used by the composition root).

    Present only when ``cache.tiers`` enables a lower tier or peer-HBM hits; without it the
    instances keep the plain single-tier :class:`~agentsim.cache.radix.RadixCache`.
    """

    def __init__(self, env: simpy.Environment, scenario):
        from agentsim.cluster.instance import LOAD_RULES

        self.env = env
        self.scenario = scenario
        self.config = scenario.cache.tiers
        self.topology = build_topology(env, scenario)
        self.block_bytes = scenario.cache.block_tokens * scenario.model.kv_bytes_per_token
        rule = self.config.load_rule
        self.load_rule_cls = LOAD_RULES.get(rule.name)
        self.caches = []
        self.instances = []

    def make_cache(self, instance: int, hbm_capacity_blocks: int):
        from agentsim.cache.policies import EVICTION_POLICIES
        from agentsim.cache.tiers import TieredCache, TierSpec

        def policy(ref):
            return EVICTION_POLICIES.get(ref.name)(EVICTION_POLICIES.validate_params(ref.name, ref.params))

        lower = []
        for name, cfg in self.config.enabled_tiers():
            capacity = int(tier_capacity_bytes(self.scenario, name, cfg, self.topology, instance) // self.block_bytes)
            lower.append(TierSpec(name, max(1, capacity), policy(cfg.eviction), cfg.write_policy,
                                  cfg.write_through_hits, cfg.inclusive))
        cache = TieredCache(hbm_capacity_blocks, policy(self.scenario.cache.eviction), lower, name="hbm")
        self.caches.append(cache)
        return cache

    def instance_kwargs(self, instance: int) -> dict:
        return {"links": self.topology.links[instance], "load_rule": self.load_rule_cls(),
                "overlap_layers": self.config.overlap_layers, "tiers_config": self.config}

    def connect_peers(self, instances) -> None:
        self.instances = list(instances)
        if not self.config.peer_hbm:
            return
        for inst in instances:
            inst.peers = [instances[i] for i in self.topology.peers(inst.instance_id)]

    # --- metrics ---------------------------------------------------------------------------
    def occupancy(self, instance) -> list[tuple[str, int, int, int]]:
        """(tier, used blocks, capacity blocks, pinned/reserved blocks) of one instance's tiers."""
        return [(t.name, t.used_blocks, t.capacity_blocks, t.reserved_blocks) for t in instance.cache.tiers[1:]]

    def link_table(self, elapsed_s: float):
        import pandas as pd

        rows = []
        for name in sorted(self.topology.all_links):
            stats = self.topology.all_links[name].stats(elapsed_s)
            rows.append({"link": name, **stats})
        return pd.DataFrame(rows, columns=["link", "kind", "bandwidth_bytes_per_s", "bytes", "transfers", "busy_s", "utilisation"])

    def summary(self, requests, elapsed_s: float) -> dict:
        """Hit tokens per tier, TTFT breakdown, per-tier and per-link-kind traffic."""
        import numpy as np

        out: dict = {}
        done = requests[~requests.rejected] if len(requests) else requests
        prompt = float(done.prompt_tokens.sum()) if len(done) else 0.0
        hits = {name: int(done[f"hit_tokens_{name}"].sum()) if len(done) else 0 for name in TIER_NAMES}
        out["hit_tokens_by_tier"] = hits
        out["hit_ratio_by_tier"] = {name: (value / prompt if prompt else float("nan")) for name, value in hits.items()}
        for name in TIER_NAMES:
            out[f"hit_ratio_{name}"] = out["hit_ratio_by_tier"][name]
        for part in ("queue_wait", "load_wait", "prefill"):
            values = done[f"{part}_s"].to_numpy(dtype=float) if len(done) else np.array([])
            values = values[np.isfinite(values)]
            out[f"ttft_{part}_mean_s"] = float(values.mean()) if len(values) else float("nan")
            out[f"ttft_{part}_p99_s"] = float(np.percentile(values, 99)) if len(values) else float("nan")
        out["loaded_bytes"] = float(done.loaded_bytes.sum()) if len(done) else 0.0
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
