"""Wiring of a disaggregated cluster (``serving.disaggregation``): the prefill and decode pools,
each with its own step timing, caches, engine caps and router, their hand-off ports, and what
the run reports about them. Used by the composition root (:mod:`agentsim.engine.simulation`);
the mechanism is :mod:`agentsim.cluster.serving.disaggregation`."""

from __future__ import annotations

from agentsim.engine.policy_factory import eviction_policy
from agentsim.cache.radix import RadixCache
from agentsim.cluster.routers import make_router
from agentsim.cluster.serving.disaggregation import DisaggregatedServing, HandoffPorts
from agentsim.cluster.serving.instance import ServingInstance
from agentsim.cluster.serving.kv_admission import make_kv_admission
from agentsim.cluster.serving.recv_interval import receive_gate
from agentsim.config.disaggregation import pool_scenario
from agentsim.engine.hierarchy import Hierarchy
from agentsim.hardware.links import link_rows
from agentsim.hardware.timing.select import build_timer
from agentsim.hardware.topology import place_pools
from agentsim.metrics.summary import rows_where, ttft_part_summary


class DisaggregatedCluster:
    """Both pools of one simulation. ``decode`` are the instances the rest of the run sees as its
    serving instances (they finish calls and keep sessions' KV between calls); ``prefill`` are
    reported separately.

    Workers are placed over ``hardware.racks`` (:func:`~agentsim.hardware.topology.place_pools`:
    each pool spread evenly over the racks), prefill workers numbered first. With lower tiers
    (``cache.tiers``) one :class:`~agentsim.engine.hierarchy.Hierarchy` spans both pools: every
    worker has its tiered cache and links (its DRAM share sized by its own GPUs), a shared remote
    store is read and written by all of them, and hand-offs cross the workers' own NICs and
    NVLink ingress, sharing them with tier traffic."""

    def __init__(self, env, scenario, on_finish, check_invariants: bool):
        self.scenario = scenario
        config = scenario.serving.disaggregation
        hw = scenario.hardware
        self.pools = {role: pool_scenario(scenario, role) for role in ("prefill", "decode")}
        self.timers = {role: build_timer(pool) for role, pool in self.pools.items()}
        self.capacity_blocks = {role: pool.kv_capacity_blocks_per_instance() for role, pool in self.pools.items()}
        shapes = [(pool.hardware.instances, pool.hardware.gpus_per_instance) for pool in self.pools.values()]
        prefill_at, decode_at = place_pools(shapes, hw.gpus_per_tray, hw.nvlink_domain_gpus, hw.racks)
        self.placements = {"prefill": prefill_at, "decode": decode_at}
        tiers = scenario.cache.tiers
        self.hierarchy = (Hierarchy(env, scenario, prefill_at + decode_at) if tiers is not None and tiers.active()
                          else None)
        self.front: DisaggregatedServing | None = None
        self.prefill = self._pool(env, "prefill", lambda leg: self.front.prefill_finished(leg), check_invariants)
        self.decode = self._pool(env, "decode", on_finish, check_invariants)
        if self.hierarchy is not None:
            self.hierarchy.connect_peers(self.prefill + self.decode)
        prefill_ports = [self._ports(env, f"prefill{i}.out", "prefill", i, ingress=False) for i in range(len(self.prefill))]
        decode_ports = [self._ports(env, f"decode{i}.in", "decode", i, ingress=True) for i in range(len(self.decode))]
        self.front = DisaggregatedServing(
            env, self.prefill, self.decode, make_router(self.pools["prefill"], self.prefill, env, prefill_pool=True),
            make_router(self.pools["decode"], self.decode, env), prefill_ports, decode_ports, prefill_at, decode_at,
            config.transfer_efficiency,
            decode_first=config.decode_first if config.decode_first is not None else scenario.serving.engine == "sglang")
        self.front.on_rejected = on_finish

    def _ports(self, env, name: str, role: str, index: int, ingress: bool) -> HandoffPorts:
        """A worker's hand-off ports: with a hierarchy its own NIC (and, ingress, NVLink) links."""
        gpus = self.pools[role].hardware.gpus_per_instance
        if self.hierarchy is None:
            return HandoffPorts(env, name, gpus, self.scenario.hardware)
        links = self.hierarchy.topology.links[self.placements[role][index].instance]
        return HandoffPorts(env, name, gpus, self.scenario.hardware, nvlink=links.nvlink_in if ingress else None,
                            nic=links.nic)

    def _pool(self, env, role: str, on_finish, check_invariants: bool) -> list[ServingInstance]:
        pool = self.pools[role]
        serving = pool.serving
        block_tokens = pool.cache.block_tokens
        ref = pool.cache.eviction
        out = []
        for index in range(pool.hardware.instances):
            extra = {}
            if self.hierarchy is not None:
                at = self.placements[role][index].instance      # numbered across both pools
                cache = self.hierarchy.make_cache(at, self.capacity_blocks[role], pool)
                extra = self.hierarchy.instance_kwargs(at)
            else:
                cache = RadixCache(self.capacity_blocks[role], eviction_policy(ref, self.scenario, block_tokens), name="hbm")
            cache.whole_node_eviction = self.scenario.cache.eviction_granularity == "node"
            out.append(ServingInstance(env, index, cache, self.timers[role][0], block_tokens, serving.batch_requests(),
                                       serving.instance_batch_tokens(), on_finish=on_finish,
                                       check_invariants=check_invariants, rank_chunk_tokens=serving.rank_chunk_tokens(),
                                       kv_rule=make_kv_admission(serving, block_tokens), preemption=serving.preemption,
                                       long_prefill_tokens=serving.long_prefill_token_threshold,
                                       mixed_prefill=serving.mixes_prefill(),
                                       receive_gate=receive_gate(serving, prefills=role == "prefill"), **extra))
        return out

    @property
    def gpus(self) -> int:
        return sum(pool.hardware.gpus_per_instance * pool.hardware.instances for pool in self.pools.values())

    def state_summary(self, simulated_s: float) -> dict:
        """The run summary's disaggregation keys: pool sizes, the prefill pool's busy fraction and
        cache, the hand-offs' bytes and links, and TTFT's parts. What the pools, hand-offs and
        ports counted is read here, before a run lets go of its workers; the keys read from the
        requests are None in their places until :func:`fill_request_summary` fills them."""
        out: dict = {"disaggregated": True,
                     "prefill_workers": len(self.prefill), "decode_workers": len(self.decode),
                     "prefill_gpus_per_worker": self.pools["prefill"].hardware.gpus_per_instance,
                     "decode_gpus_per_worker": self.pools["decode"].hardware.gpus_per_instance,
                     "prefill_timing_source": self.timers["prefill"][1].source,
                     "prefill_timing_deployment": self.timers["prefill"][1].deployment,
                     "prefill_busy_fraction": (sum(i.busy_s for i in self.prefill) / (simulated_s * len(self.prefill))
                                               if simulated_s > 0 else 0.0),
                     "prefill_evicted_blocks": sum(i.cache.evicted_blocks for i in self.prefill),
                     "prefill_iterations": sum(i.iterations for i in self.prefill),
                     "kv_transfers": sum(h.transfers for h in self.front.handoffs),
                     "kv_transfer_bytes": float(sum(h.transferred_bytes for h in self.front.handoffs)),
                     "decode_hit_tokens": None,
                     "racks": self.scenario.hardware.racks}
        out.update(dict.fromkeys(_TTFT_PART_KEYS))
        out["prefill_busiest_share"] = None
        # Payload bytes by link kind, counted once per hand-off (each crosses two ports).
        out["kv_transfer_bytes_by_link_kind"] = {kind: float(sum(h.bytes_by_link_kind[kind] for h in self.front.handoffs))
                                                 for kind in ("nvlink", "network")}
        ports = {link.name: link for p in self.front.prefill_ports + self.front.decode_ports for link in p.links()}
        out["kv_transfer_link_max_utilisation"] = max((link.stats(simulated_s)["utilisation"] for link in ports.values()),
                                                      default=0.0)
        return out

    def link_rows(self, simulated_s: float) -> list[dict]:
        """The hand-off ports' rows of the link table (:func:`agentsim.hardware.links.link_rows`)."""
        return link_rows(self.front.all_links(), simulated_s)


_TTFT_PARTS = ("queue_wait", "prefill", "decode_queue", "kv_transfer", "decode_first_step")
_TTFT_PART_KEYS = tuple(f"ttft_{part}_{stat}" for part in _TTFT_PARTS for stat in ("mean_s", "p99_s"))


def fill_request_summary(state: dict, requests) -> dict:
    """``state`` (a :meth:`DisaggregatedCluster.state_summary`) with its request keys filled from
    the served rows of ``requests``: the decode workers' own hit tokens, TTFT's parts, and the
    busiest prefill worker's share of the prompts (against a fair share of one)."""
    out = dict(state)
    done = rows_where(requests, ~requests.rejected) if len(requests) else requests
    out["decode_hit_tokens"] = int(done.decode_hit_tokens.sum()) if len(done) else 0
    out.update(ttft_part_summary(done, _TTFT_PARTS))
    served = done.prefill_worker.value_counts() if len(done) else None
    out["prefill_busiest_share"] = (float(served.max() * state["prefill_workers"] / served.sum())
                                    if served is not None and len(served) else float("nan"))
    return out
