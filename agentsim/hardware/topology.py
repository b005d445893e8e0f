"""The cluster's physical shape: instances grouped by tray and NVLink domain, and every link
between tiers, built from the tier kinds (:mod:`agentsim.hardware.tier_kinds`).

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
* Several racks (``hardware.racks``): each rack is one NVLink domain holding an equal share of
  the instances, numbered rack by rack; GPUs, trays and domains are numbered across racks.
  Racks are joined by the scale-out network, whose only modelled bottleneck is each instance's
  NIC (GPUs x per-GPU NIC bandwidth per direction, ``rdma_latency_s`` per transfer): the fabric
  between racks is taken as non-blocking, as in a rail-optimised fat tree.
* Peer-HBM loads inside an NVLink domain come over the receiving instance's NVLink ingress link;
  from another domain (another rack) over the sending and the receiving instance's NICs at
  once (the bytes stream through both, so the more contended NIC sets the pace).

Loads: DRAM -> HBM over ``h2d``; disk -> DRAM -> HBM over the tray's NVMe read link then
``h2d`` (staging through DRAM, the host tier); remote -> DRAM -> HBM over the store link, the
NIC, then ``h2d``. With another host tier (a kind with ``host``) disk and remote loads end with
its load links instead of ``h2d``.
Copies down: HBM -> DRAM over ``d2h``; DRAM -> disk over the NVMe write link; to remote over the
store link (the NIC without one). Each of these is a field of a tier kind, not code here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import simpy

from agentsim.hardware.links import Link
from agentsim.hardware.tier_kinds import TIER_KINDS, host_tier, link_endpoints


class InstanceLinks:
    """The links one instance's transfers use (some shared with other instances), by role
    (``h2d``, ``d2h``, ``nvlink_in``, ``nic``, ``nvme_read``, ``nvme_write``, ``store``, or a
    registered kind's own); a role is also an attribute (``links.h2d``), None if not built.
    ``host_tier``: the hierarchy's host tier (:func:`~agentsim.hardware.tier_kinds.host_tier`),
    which loads from the kinds below it stage through; None: none is configured."""

    def __init__(self, host_tier: str | None = None, **links_by_role: Link | None):
        self.by_role: dict[str, Link | None] = dict(links_by_role)
        self.host_tier = host_tier
        self._load_roles: dict[str, tuple[str, ...]] = {}

    def __getattr__(self, role: str) -> Link | None:
        by_role = self.__dict__.get("by_role")
        if by_role is None or role.startswith("__"):
            raise AttributeError(role)
        return by_role.get(role)

    def load_path(self, tier_name: str) -> list[Link]:
        """Links crossed, in order, to bring a block from ``tier_name`` into HBM: the kind's own
        hops, then, for a kind staged through host memory, the host tier's (or, with none
        configured, the ``stages_through`` kind's) load links."""
        roles = self._load_roles.get(tier_name)
        if roles is None:
            kind = TIER_KINDS.get(tier_name)
            if kind is None or not kind.load_links:
                raise ValueError(f"no load path from tier {tier_name!r}")
            roles = kind.load_links
            via = (self.host_tier or kind.stages_through) if kind.stages_through is not None else None
            if via is not None and via != tier_name:
                roles = roles + TIER_KINDS[via].load_links
            self._load_roles[tier_name] = roles
        by_role = self.by_role
        return [by_role[role] for role in roles if by_role.get(role) is not None]

    def staging_path(self, tier_name: str) -> list[Link]:
        """Links a prefetch crosses to stage a block of ``tier_name`` into the host tier (the
        kind's own hops, without the host tier's into HBM)."""
        kind = TIER_KINDS.get(tier_name)
        if kind is None or kind.stages_through is None:
            raise ValueError(f"tier {tier_name!r} is not staged through a host tier")
        by_role = self.by_role
        return [by_role[role] for role in kind.load_links if by_role.get(role) is not None]

    def write_link(self, src: str, dst: str) -> Link | None:
        """The bottleneck link of a copy down from ``src`` to ``dst`` (None: no such link)."""
        kind = TIER_KINDS.get(dst)
        if kind is None:
            return None
        for role in kind.write_links:
            link = self.by_role.get(role)
            if link is not None:
                return link
        return None


@dataclass
class Placement:
    """Where one instance (or disaggregated worker) is; ``gpus`` 0: ``hardware.gpus_per_instance``."""

    instance: int
    first_gpu: int
    tray: int
    domain: int
    rack: int = 0
    gpus: int = 0


@dataclass
class Topology:
    """Placement of instances and every link, built once per simulation."""

    placements: list[Placement]
    links: list[InstanceLinks]
    all_links: dict[str, Link] = field(default_factory=dict)

    def peers(self, instance: int) -> list[int]:
        """Every other instance, those of the same NVLink domain first (a peer-HBM hit from one
        of them is the cheaper load), each group in instance order."""
        domain = self.placements[instance].domain
        near = [p.instance for p in self.placements if p.domain == domain and p.instance != instance]
        far = [p.instance for p in self.placements if p.domain != domain]
        return near + far

    def same_domain(self, a: int, b: int) -> bool:
        return self.placements[a].domain == self.placements[b].domain

    def peer_load_links(self, receiver: int, sender: int) -> list[Link]:
        """Links a peer-HBM load from ``sender`` into ``receiver`` crosses, all at once (the
        transfer takes as long as its slowest link): the receiver's NVLink ingress inside one
        NVLink domain; across domains (racks) the sender's and the receiver's NIC."""
        if self.same_domain(receiver, sender):
            return [self.links[receiver].nvlink_in]
        return [self.links[sender].nic, self.links[receiver].nic]

    def instances_in_tray(self, tray: int) -> int:
        return sum(1 for p in self.placements if p.tray == tray)


def place(n_instances: int, gpus_per_instance: int, gpus_per_tray: int, domain_gpus: int,
          racks: int = 1) -> list[Placement]:
    """Instances ``0..n-1`` split evenly between ``racks``, numbered rack by rack; inside a rack
    an instance is ``gpus_per_instance`` consecutive GPUs, trays and NVLink domains counted from
    the rack's first GPU, and every number (GPU, tray, domain) continues across racks."""
    per_rack = -(-n_instances // racks)
    rack_gpus = per_rack * gpus_per_instance
    trays_per_rack = -(-rack_gpus // gpus_per_tray)
    domains_per_rack = -(-rack_gpus // domain_gpus)
    out = []
    for index in range(n_instances):
        rack, local = divmod(index, per_rack)
        local_first = local * gpus_per_instance
        out.append(Placement(index, rack * rack_gpus + local_first,
                             rack * trays_per_rack + local_first // gpus_per_tray,
                             rack * domains_per_rack + local_first // domain_gpus, rack))
    return out


def place_pools(pools: list[tuple[int, int]], gpus_per_tray: int, domain_gpus: int,
                racks: int = 1) -> list[list[Placement]]:
    """Placements of disaggregated pools, ``pools`` = [(workers, GPUs per worker)] (prefill,
    decode), numbered across pools in order (the first pool's workers are instances 0..n-1).

    Each pool is spread evenly over the racks (worker ``i`` of ``n`` in rack ``i * racks // n``),
    so every rack holds its share of prefill and of decode workers, as deployments that keep
    most hand-offs on a rack's NVLink do. Inside a rack the workers take consecutive GPUs, the
    pools in order; a worker wider than what is left of an NVLink domain starts at the next one
    (its GPUs must share one domain); a worker wider than a whole domain spans several. Racks
    start at multiples of a stride that holds the fullest rack and ends on a domain and tray
    boundary, so GPU, tray and domain numbers continue across racks without sharing any."""
    local: list[list[tuple[int, int, int]]] = [[] for _ in range(racks)]   # per rack: (pool, worker, first GPU)
    extent = [0] * racks
    for pool, (workers, gpus) in enumerate(pools):
        for worker in range(workers):
            rack = worker * racks // workers
            gpu = extent[rack]
            left = domain_gpus - gpu % domain_gpus
            if gpus <= domain_gpus and gpus > left:
                gpu += left
            local[rack].append((pool, worker, gpu))
            extent[rack] = gpu + gpus
    unit = math.lcm(domain_gpus, gpus_per_tray)
    stride = -(-max(extent, default=0) // unit) * unit
    out: list[list[Placement | None]] = [[None] * workers for workers, _ in pools]
    first_instance = [sum(workers for workers, _ in pools[:pool]) for pool in range(len(pools))]
    for rack, entries in enumerate(local):
        for pool, worker, gpu in entries:
            first = rack * stride + gpu
            out[pool][worker] = Placement(first_instance[pool] + worker, first, first // gpus_per_tray,
                                          first // domain_gpus, rack, pools[pool][1])
    return out


def rack_extents_gpus(pools: list[tuple[int, int]], domain_gpus: int, racks: int) -> list[int]:
    """GPUs each rack spans with :func:`place_pools` (domain padding included)."""
    placed = place_pools(pools, 1, domain_gpus, racks)
    stride_start = [min((p.first_gpu for pool in placed for p in pool if p.rack == rack), default=0)
                    for rack in range(racks)]
    ends = [0] * racks
    for pool in placed:
        for p in pool:
            ends[p.rack] = max(ends[p.rack], p.first_gpu + p.gpus)
    return [end - start for end, start in zip(ends, stride_start)]


def _enabled_tier(tiers, name: str):
    """The enabled ``cache.tiers`` entry of kind ``name``, or None."""
    cfg = getattr(tiers, name, None) if tiers is not None else None
    return cfg if cfg is not None and getattr(cfg, "enabled", False) else None


def link_overrides(tiers) -> dict[str, tuple[float | None, float | None]]:
    """{link role: (bandwidth, latency)} from ``cache.tiers.links`` (links to disabled tiers skipped)."""
    out: dict[str, tuple[float | None, float | None]] = {}
    if tiers is None:
        return out
    endpoints = link_endpoints()
    for link in tiers.links:
        ends = (link.from_tier, link.to_tier)
        if any(getattr(tiers, end, None) is not None and not getattr(tiers, end).enabled for end in ends):
            continue
        role = endpoints[ends]
        bw, lat = out.get(role, (None, None))
        out[role] = (link.bandwidth_bytes_per_s if link.bandwidth_bytes_per_s is not None else bw,
                     link.latency_s if link.latency_s is not None else lat)
    return out


def build_topology(env: simpy.Environment, scenario, placements: list[Placement] | None = None) -> Topology:
    """Place the instances and build every tier kind's links (shared, per tray, per instance).

    ``placements``: given ones (disaggregated workers, :func:`place_pools`), each with its own
    GPU count for its per-instance links; absent: ``hardware.instances`` placed by :func:`place`."""
    hw = scenario.hardware
    g = hw.gpus_per_instance
    if placements is None:
        placements = place(hw.instances, g, hw.gpus_per_tray, hw.nvlink_domain_gpus, hw.racks)
    tiers = scenario.cache.tiers
    host = host_tier([name for name, _ in tiers.enabled_tiers()]) if tiers is not None else None
    overrides = link_overrides(tiers)
    all_links: dict[str, Link] = {}
    specs = [(spec, _enabled_tier(tiers, kind.name)) for kind in TIER_KINDS.values() for spec in kind.links]
    specs = [(spec, cfg) for spec, cfg in specs if spec.built(hw, cfg)]

    def make(spec, cfg, gpus: int = g, **where) -> Link:
        bw, lat = overrides.get(spec.role, (None, None)) if spec.overridable else (None, None)
        link = Link(env, spec.name.format(**where), bw if bw is not None else spec.bandwidth_bytes_per_s(hw, gpus, cfg),
                    lat if lat is not None else spec.latency_s(hw, cfg), spec.link_kind)
        all_links[link.name] = link
        return link

    shared = {spec.role: make(spec, cfg) for spec, cfg in specs if spec.scope == "shared"}
    trays: dict[int, dict[str, Link]] = {}
    links = []
    for p in placements:
        if p.tray not in trays:
            trays[p.tray] = {spec.role: make(spec, cfg, tray=p.tray) for spec, cfg in specs if spec.scope == "tray"}
        own = {spec.role: make(spec, cfg, p.gpus or g, instance=p.instance) for spec, cfg in specs if spec.scope == "instance"}
        links.append(InstanceLinks(host, **{**own, **trays[p.tray], **shared}))
    return Topology(placements, links, all_links)


def tier_capacity_bytes(scenario, name: str, tier_cfg, topology: Topology, instance: int) -> float:
    """Capacity of lower tier ``name`` for one instance: given (a shared store's given capacity
    split evenly between the instances), or its share of the hardware (the kind's capacity rule)."""
    if tier_cfg.capacity_bytes is not None:
        if getattr(tier_cfg, "shared", False):
            return tier_cfg.capacity_bytes / len(topology.placements)  # one instance's share of the store
        return tier_cfg.capacity_bytes
    kind = TIER_KINDS.get(name)
    if kind is None or kind.capacity_bytes is None:
        raise ValueError(f"tier {name!r} needs capacity_bytes")
    sharing = 1
    if kind.capacity_scope == "tray":
        sharing = topology.instances_in_tray(topology.placements[instance].tray)
    return kind.capacity_bytes(scenario.hardware, tier_cfg, sharing)
