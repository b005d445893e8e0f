"""Tier kinds as data: what the physical model needs to know about HBM, peer HBM, DRAM, disk and
a remote store, one :class:`TierKind` entry each.

Per kind: the links a load from it into HBM crosses (in order), the link a copy down into it
uses, the links it brings to the topology (how many, how fast, shared by whom), which
``cache.tiers.links`` endpoints name them, and its capacity rule (its share of the hardware, or
``None``: the scenario must give ``capacity_bytes``). :mod:`agentsim.hardware.topology` builds
links and capacities from these entries, the load checks (:mod:`agentsim.engine.tier_checks`)
validate a scenario's tiers against them and the run reports hits per kind, so a new tier kind
(CXL memory, a pooled store) is one :func:`register_tier_kind` call plus the hardware fields its
links read (in :class:`~agentsim.config.scenario.HardwareConfig`, or the tier's own
``bandwidth_bytes_per_s``/``latency_s`` when ``tier_link_fields``). The serving instance reads
the same entries through :class:`~agentsim.hardware.topology.InstanceLinks` (``load_path``,
``write_link``, ``staging_path``).

**The host tier.** One kind may be a *host* tier (``host=True``: DRAM; a CXL expander could
be another): the tier that loads from the kinds below it stage through (their ``load_links``
are the hops into it, and the host tier's own ``load_links`` follow), that a prefetch stages
hits of those kinds into and that swap preemption moves KV to. Which tier is the host is
decided per scenario (:func:`host_tier`: the first enabled host kind; the load checks require
it to be the first tier below HBM). Without an enabled host tier, a kind with
``stages_through`` still crosses that kind's links (host memory as a bounce buffer, e.g. NVMe
-> Grace memory -> C2C -> HBM), and there is no prefetch or swap preemption.

Numbers and their sources: ``reference/hardware.md`` and ``agentsim/profiles/hardware.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal

#: Where one link of a kind exists: one per instance, one per tray (shared by its instances),
#: or one for the whole cluster.
Scope = Literal["instance", "tray", "shared"]


def _always(hw: Any, tier_cfg: Any) -> bool:
    return True


@dataclass(frozen=True)
class LinkSpec:
    """One link a tier kind brings. ``name`` is formatted with ``instance`` or ``tray``;
    ``bandwidth_bytes_per_s(hw, gpus_per_instance, tier_cfg)`` is the link's total as built (per
    instance, per tray or shared) and ``latency_s(hw, tier_cfg)`` its per-transfer setup;
    ``tier_cfg`` is the kind's enabled ``cache.tiers`` entry or None. ``built(hw, tier_cfg)``
    says whether the link exists at all; ``overridable``: ``cache.tiers.links`` may set it."""

    role: str
    name: str
    scope: Scope
    link_kind: str        # reported per link kind: nvlink_c2c, nvlink, nvme, network
    bandwidth_bytes_per_s: Callable[[Any, int, Any], float]
    latency_s: Callable[[Any, Any], float]
    built: Callable[[Any, Any], bool] = _always
    overridable: bool = True


@dataclass(frozen=True)
class TierKind:
    """One kind of tier. ``lower``: configured under ``cache.tiers.<name>`` (a tier below HBM);
    HBM and peer HBM are kinds too (link endpoints, hit sources) but not configured tiers."""

    name: str
    description: str
    lower: bool = True
    load_links: tuple[str, ...] = ()      # link roles a load into HBM crosses, in order (absent ones skipped)
    write_links: tuple[str, ...] = ()     # a copy down into this kind uses the first of these that exists
    endpoints: dict[tuple[str, str], str] = field(default_factory=dict)  # cache.tiers.links (from, to) -> role
    links: tuple[LinkSpec, ...] = ()
    #: Capacity per instance from the hardware: (hw, tier_cfg, instances sharing it) -> bytes;
    #: None: the scenario must give capacity_bytes (``capacity_note`` says why).
    capacity_bytes: Callable[[Any, Any, int], float] | None = None
    capacity_note: str = ""
    #: Which instances share the capacity rule's hardware: "instance" or "tray".
    capacity_scope: Scope = "instance"
    #: The kind's own bandwidth_bytes_per_s/latency_s in cache.tiers configure its links.
    tier_link_fields: bool = False
    #: A hardware mistake that makes the kind unusable (message), or None.
    hardware_problem: Callable[[Any], str | None] = lambda hw: None
    #: Hits in this kind are staged into HBM through the host tier; this kind's links are
    #: crossed when the hierarchy has none (disk and remote: DRAM, as a bounce buffer).
    stages_through: str | None = None
    #: A host tier (module docstring): loads from kinds with ``stages_through`` stage through it,
    #: prefetch stages into it, swap preemption swaps into it.
    host: bool = False
    #: ``shared: true`` may make the kind one store every instance reads (its capacity the whole store's).
    shareable: bool = False
    #: Price of the kind's configured capacity, USD per GB-month: (hw, tier_cfg) -> price (a
    #: scenario's ``cache.tiers.<name>.usd_per_gb_month`` overrides it). None: the kind has no
    #: price, and a run charges its capacity at zero and says so (:func:`tier_price_usd_per_gb_month`).
    #: Kinds that are not configured tiers (HBM, peer HBM) come with the GPUs and their GPU-hour price.
    usd_per_gb_month: Callable[[Any, Any], float] | None = None


#: Every tier kind by name, in the order results list them.
TIER_KINDS: dict[str, TierKind] = {}


def register_tier_kind(kind: TierKind) -> TierKind:
    """Add a tier kind (its name must be new); returns it."""
    if kind.name in TIER_KINDS:
        raise ValueError(f"tier kind {kind.name!r} registered twice")
    TIER_KINDS[kind.name] = kind
    return kind


def unregister_tier_kind(name: str) -> None:
    """Remove a tier kind (for tests that register a throw-away one)."""
    TIER_KINDS.pop(name, None)


def tier_names() -> tuple[str, ...]:
    """Every kind's name (link endpoints and hit sources), in result order."""
    return tuple(TIER_KINDS)


def lower_tier_names() -> tuple[str, ...]:
    """Kinds configured under ``cache.tiers`` (below HBM), in their default top-to-bottom order."""
    return tuple(name for name, kind in TIER_KINDS.items() if kind.lower)


def host_tier(enabled: list[str] | tuple[str, ...]) -> str | None:
    """The host tier among the ``enabled`` lower tiers (top to bottom): the first host kind."""
    for name in enabled:
        kind = TIER_KINDS.get(name)
        if kind is not None and kind.host:
            return name
    return None


def tier_price_usd_per_gb_month(name: str, hw: Any, tier_cfg: Any = None) -> float | None:
    """Price of tier kind ``name``'s capacity in USD per GB-month: the tier's own
    ``usd_per_gb_month`` if the scenario sets one, else the kind's rule; 0.0 for HBM and peer
    HBM (paid with the GPU-hour price); None when neither gives one (an unknown kind, or a kind
    registered without ``usd_per_gb_month``): the caller charges zero and must say so."""
    override = getattr(tier_cfg, "usd_per_gb_month", None)
    if override is not None:
        return float(override)
    kind = TIER_KINDS.get(name)
    if kind is None:
        return None
    if not kind.lower:
        return 0.0
    if kind.usd_per_gb_month is None:
        return None
    return float(kind.usd_per_gb_month(hw, tier_cfg))


def link_endpoints() -> dict[tuple[str, str], str]:
    """``cache.tiers.links`` (from, to) -> link role, over every kind."""
    out: dict[tuple[str, str], str] = {}
    for kind in TIER_KINDS.values():
        out.update(kind.endpoints)
    return out


def _drives(hw, tier_cfg) -> bool:
    return hw.nvme_drives_per_tray > 0


def _remote_enabled(hw, tier_cfg) -> bool:
    return tier_cfg is not None


register_tier_kind(TierKind(
    "hbm", "GPU memory of the serving instance (tier 0)", lower=False,
    endpoints={},
))
register_tier_kind(TierKind(
    "peer_hbm", "HBM of another instance in the same NVLink domain", lower=False,
    load_links=("nvlink_in",),
    endpoints={("peer_hbm", "hbm"): "nvlink_in"},
    links=(LinkSpec("nvlink_in", "inst{instance}.nvlink_in", "instance", "nvlink",
                    lambda hw, g, cfg: g * hw.nvlink_bytes_per_s, lambda hw, cfg: hw.nvlink_latency_s),),
))
register_tier_kind(TierKind(
    "dram", "host DRAM (Grace LPDDR) over NVLink-C2C, the instance's GPUs' share",
    load_links=("h2d",), write_links=("d2h",),
    endpoints={("dram", "hbm"): "h2d", ("hbm", "dram"): "d2h"},
    links=(LinkSpec("h2d", "inst{instance}.c2c_h2d", "instance", "nvlink_c2c",
                    lambda hw, g, cfg: g * hw.h2d_bytes_per_s, lambda hw, cfg: hw.transfer_setup_s),
           LinkSpec("d2h", "inst{instance}.c2c_d2h", "instance", "nvlink_c2c",
                    lambda hw, g, cfg: g * hw.d2h_bytes_per_s, lambda hw, cfg: hw.transfer_setup_s)),
    capacity_bytes=lambda hw, cfg, sharing: hw.dram_bytes_per_gpu * hw.gpus_per_instance * cfg.capacity_fraction,
    host=True,
    usd_per_gb_month=lambda hw, cfg: hw.dram_usd_per_gb_month,   # sources: docs/experiments.md, "Memory prices"
))
register_tier_kind(TierKind(
    "disk", "local NVMe drives of the tray, shared by its instances (staged through DRAM)",
    load_links=("nvme_read",), write_links=("nvme_write",),   # then the host tier's (stages_through)
    endpoints={("disk", "dram"): "nvme_read", ("dram", "disk"): "nvme_write"},
    links=(LinkSpec("nvme_read", "tray{tray}.nvme_read", "tray", "nvme",
                    lambda hw, g, cfg: hw.nvme_drives_per_tray * hw.nvme_read_bytes_per_s_per_drive,
                    lambda hw, cfg: hw.nvme_latency_s, built=_drives),
           LinkSpec("nvme_write", "tray{tray}.nvme_write", "tray", "nvme",
                    lambda hw, g, cfg: hw.nvme_drives_per_tray * hw.nvme_write_bytes_per_s_per_drive,
                    lambda hw, cfg: hw.nvme_latency_s, built=_drives)),
    capacity_bytes=lambda hw, cfg, sharing: (hw.nvme_drives_per_tray * hw.nvme_bytes_per_drive)
    * cfg.capacity_fraction / max(1, sharing),
    capacity_scope="tray",
    hardware_problem=lambda hw: ("a disk tier needs local NVMe drives, but hardware.nvme_drives_per_tray is 0"
                                 if hw.nvme_drives_per_tray == 0 else None),
    stages_through="dram",
    usd_per_gb_month=lambda hw, cfg: hw.nvme_usd_per_gb_month,
))
register_tier_kind(TierKind(
    "remote", "remote store over the network: one shared store link, each instance's NIC (staged through DRAM)",
    load_links=("store", "nic"), write_links=("store", "nic"),   # then the host tier's (stages_through)
    endpoints={("remote", "dram"): "store", ("dram", "remote"): "store"},
    links=(LinkSpec("store", "remote_store", "shared", "network",
                    lambda hw, g, cfg: cfg.bandwidth_bytes_per_s or 400e9,
                    lambda hw, cfg: cfg.latency_s if cfg.latency_s is not None else hw.rdma_latency_s,
                    built=_remote_enabled),
           LinkSpec("nic", "inst{instance}.nic", "instance", "network",
                    lambda hw, g, cfg: g * hw.nic_bytes_per_s, lambda hw, cfg: hw.rdma_latency_s,
                    overridable=False)),
    capacity_note="a remote store's size is not part of the hardware profile",
    tier_link_fields=True,
    stages_through="dram",
    shareable=True,
    usd_per_gb_month=lambda hw, cfg: hw.remote_usd_per_gb_month,
))

__all__ = ["LinkSpec", "TIER_KINDS", "TierKind", "host_tier", "link_endpoints", "lower_tier_names", "register_tier_kind",
           "tier_names", "tier_price_usd_per_gb_month", "unregister_tier_kind"]
