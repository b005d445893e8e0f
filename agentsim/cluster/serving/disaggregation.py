"""Disaggregated serving: prefill workers compute prompts, decode workers receive their KV and
decode (NVIDIA Dynamo's disaggregated mode, SGLang's PD disaggregation, vLLM's NIXL connector).

A call goes through two workers:

1. the prefill router (the scenario's router over the prefill pool: KV-aware over the prefill
   workers' caches by default) places a *prefill leg*: a copy of the call with one output token,
   served by an ordinary :class:`~agentsim.cluster.serving.instance.ServingInstance` (queue,
   chunked prefill, its own prefix cache, which keeps the prompt's blocks afterwards);
2. when the leg's first token is out, the decode router (the same router kind over the decode
   pool, seeing the decode workers' caches) places the call on a decode worker. Its admission
   applies as usual (batch slots, the engine's KV admission rule, its own cached prefix of the
   session); then, instead of prefilling, the worker waits for the prompt's KV, minus what it
   already holds, to come over from the prefill worker (:class:`KvHandoff`); once it has
   arrived the call decodes, its first token coming with its first decode step.

TTFT = prefill queue + prefill + decode queue + KV transfer + first decode step (decoding
first, the wait for the decode worker is in the queue before the prefill and the decode queue is 0). The call's hit and computed tokens
are the prefill worker's (they decide the compute); the decode worker's own prefix only
shortens the transfer (``decode_hit_tokens``). With lower tiers, the part of that prefix the
decode worker loads from its own tiers comes up while the hand-off runs; the first token waits
for both (KV transfer = the wait from decode admission to the last arrival).

The transfer crosses the prefill worker's egress port and the decode worker's ingress port at
once (:class:`HandoffPorts`): NVLink when both workers are in one NVLink domain (a rack), the
NICs (RDMA) otherwise. Each port is a processor-sharing :class:`~agentsim.hardware.links.Link`,
so concurrent hand-offs into one decode worker, or out of one prefill worker, share its
bandwidth; with a memory hierarchy the NIC ports are the workers' own NIC links, shared with
remote-store traffic.

Decode first (``decode_first``, SGLang's prealloc queue): the decode router places the call
before its prefill; the decode worker's admission reserves its slot and KV and only then sends
the prefill leg to the prefill router (:meth:`KvHandoff.receive`), so a full decode pool holds
prefills back instead of letting them run ahead. Otherwise (Dynamo's flow for TensorRT-LLM and
vLLM) the decode worker is chosen when the prefill ends and a full decode worker shows up as
decode queueing.

Simplified on purpose: the KV moves as one transfer after
the prefill, not layer by layer while it runs; the prefill worker's copy is not freed early
(its cache keeps the blocks, as a prefix cache would).
"""

from __future__ import annotations

import simpy

from agentsim.cluster.request import LLMRequest
from agentsim.cluster.serving.batch import Running
from agentsim.hardware.links import Link


class HandoffPorts:
    """One worker's ports for KV hand-offs: NVLink and NIC, in one direction (egress on a prefill
    worker, ingress on a decode worker), each its GPUs times the per-GPU bandwidth.

    With a memory hierarchy the worker's own links are passed in (its NIC, which remote-store
    reads and writes use too, and a decode worker's NVLink ingress), so hand-offs share their
    bandwidth with tier traffic; otherwise the ports are links of their own."""

    def __init__(self, env: simpy.Environment, name: str, gpus: int, hw, nvlink: Link | None = None,
                 nic: Link | None = None):
        self.nvlink = nvlink or Link(env, f"{name}.nvlink", gpus * hw.nvlink_bytes_per_s, hw.nvlink_latency_s, "nvlink")
        self.nic = nic or Link(env, f"{name}.nic", gpus * hw.nic_bytes_per_s, hw.rdma_latency_s, "network")
        #: The ports built here (not a hierarchy's links, which it reports itself).
        self.own = [link for link, given in ((self.nvlink, nvlink), (self.nic, nic)) if given is None]

    def links(self) -> list[Link]:
        return [self.nvlink, self.nic]


def transfer_links(source: HandoffPorts, source_at, dest: HandoffPorts, dest_at) -> list[Link]:
    """The links one hand-off crosses: NVLink inside an NVLink domain (a rack), the NICs between
    domains. ``source_at``/``dest_at``: the workers' placements (anything with ``domain``)."""
    if source_at.domain == dest_at.domain:
        return [source.nvlink, dest.nvlink]
    return [source.nic, dest.nic]


def handoff(env: simpy.Environment, links: list[Link], payload_bytes: float, efficiency: float) -> simpy.Event:
    """Move a hand-off's ``payload_bytes`` through every link of ``links`` at once; the transfer
    engine reaches ``efficiency`` of a link's bandwidth, so each link carries
    ``payload_bytes / efficiency`` (its time on the link; the payload is what the request and
    the summary count). Fires when the last byte has arrived:
    latency + payload / (efficiency x the slowest link's share)."""
    wire_bytes = payload_bytes / efficiency
    return simpy.AllOf(env, [link.transfer(wire_bytes) for link in links])


class KvHandoff:
    """The decode side of a hand-off, set as a decode instance's ``kv_handoff``.

    The instance's admission calls :meth:`receive` for a call a prefill worker computed, after
    its cache match and reservation and before the call joins the batch. The decode worker's own
    cached prefix (``state.context_tokens``: its HBM, plus what its lower tiers load in parallel
    when it has them) is not sent. The instance calls :meth:`complete` once every piece of KV the
    call waits for is in HBM. Uses of its host: ``env``, ``loading``, ``kv_arrived()`` and
    ``cost.kv_bytes_per_token``."""

    def __init__(self, host, cluster: "DisaggregatedServing"):
        self.host = host
        self.cluster = cluster
        self.transfers = 0
        self.transferred_bytes = 0.0
        #: Payload bytes by the kind of link they crossed (``nvlink`` or ``network``).
        self.bytes_by_link_kind = {"nvlink": 0.0, "network": 0.0}
        self._waiting: dict[int, float] = {}   # request id -> decode admission time

    def receive(self, state: Running) -> None:
        req = state.req
        host = self.host
        now = host.env.now
        own_hit = state.context_tokens        # the prefix this decode worker holds (or loads) already
        req.decode_hit_tokens = own_hit
        state.prefill_left = 0
        state.context_tokens = req.prompt_tokens
        state.loaded = False                   # the batch loop waits for it like for a load
        state.kv_waits += 1
        host.loading += 1
        if req.prefill_worker >= 0:            # prefilled already: its KV comes over now
            req.decode_queue_s = now - req.prefill_done_s
            self._send(state, own_hit)
        else:                                  # decode first: the slot and KV are held, now prefill
            host.env.process(self._prefill_then_send(state, own_hit))

    def _send(self, state: Running, own_hit: int) -> None:
        req = state.req
        host = self.host
        # The prefill worker's hit and computed tokens are the call's (token conservation).
        req.hit_tokens = req.prefill_hit_tokens
        req.prefilled_tokens = req.prefill_computed_tokens
        req.tier_hit_tokens = dict(req.prefill_tier_hit_tokens)
        size_bytes = (req.prompt_tokens - own_hit) * host.cost.kv_bytes_per_token
        req.kv_transfer_bytes = size_bytes
        self.transfers += 1
        self.transferred_bytes += size_bytes
        self._waiting[req.request_id] = host.env.now
        links = self.cluster.links_between(req.prefill_worker, host.instance_id)
        self.bytes_by_link_kind[links[0].kind] += size_bytes
        host.env.process(self._transfer(state, links, size_bytes))

    def _prefill_then_send(self, state: Running, own_hit: int):
        """Decode first (SGLang's prealloc queue): the decode worker has reserved the call's slot
        and KV; the prefill runs now and its KV comes over when it is done. The wait for the
        reservation is part of the call's queue before its prefill (``queue_wait_s``, charged to
        the decode worker's queue causes), so ``decode_queue_s`` is 0."""
        req = state.req
        host = self.host
        waited = {"slot": req.queue_slot_s, "kv": req.queue_kv_s, "load": req.queue_load_s, "step": req.queue_step_s}
        leg = self.cluster.prefill_leg(req)
        yield leg.done
        if leg.rejected:
            self._drop(state, f"prefill_{leg.reject_reason}")
            return
        self.cluster.take_prefill(req, leg)
        # The call's queue before its prefill: the reservation, then the prefill worker's queue.
        req.queue_slot_s += waited["slot"]
        req.queue_kv_s += waited["kv"]
        req.queue_load_s += waited["load"]
        req.queue_step_s += waited["step"]
        req.decode_queue_s = 0.0
        self._send(state, own_hit)

    def _drop(self, state: Running, reason: str) -> None:
        """Give back the reservation of a call whose prefill worker rejected it."""
        host = self.host
        req = state.req
        host.loading -= 1
        state.kv_waits -= 1
        host.batch.remove(state)
        node = host.cache.commit(state.node, [], state.cached_blocks, state.reserved_blocks, host.env.now)
        host.cache.unpin(node)
        req.hit_tokens = req.prefilled_tokens = req.decode_hit_tokens = 0   # it was served nowhere
        req.tier_hit_tokens = {}
        req.rejected = True
        req.reject_reason = reason
        req.finish_s = host.env.now
        host.on_finish(req)
        host.wake()

    def _transfer(self, state: Running, links: list[Link], size_bytes: float):
        yield handoff(self.host.env, links, size_bytes, self.cluster.efficiency)
        self.host.kv_arrived(state)

    def complete(self, state: Running) -> bool:
        """All of ``state``'s KV is in HBM: the hand-off and, in parallel, any load from the
        decode worker's own lower tiers. ``kv_transfer_s`` is the wait from decode admission.
        True if ``state`` was handed over (its first token then comes with the decode worker's
        next step), False for an ordinary load."""
        start = self._waiting.pop(state.req.request_id, None)
        if start is None:
            return False
        state.req.kv_transfer_s = self.host.env.now - start
        return True


class DisaggregatedServing:
    """The front of a disaggregated cluster, in the router's place for the simulation:
    :meth:`submit` each call, :meth:`on_finish` each finished or rejected one (decode side).

    ``prefill_instances`` and ``decode_instances`` are numbered from 0 within their pool (each
    pool's router indexes its workers by id); the prefill instances' ``on_finish`` must be
    :meth:`prefill_finished`. ``on_rejected(call)`` is told of a call its prefill worker
    rejected (it never reaches a decode worker)."""

    def __init__(self, env: simpy.Environment, prefill_instances: list, decode_instances: list,
                 prefill_router, decode_router, prefill_ports: list[HandoffPorts], decode_ports: list[HandoffPorts],
                 prefill_at: list, decode_at: list, efficiency: float = 1.0, decode_first: bool = False):
        self.env = env
        self.prefill_instances = prefill_instances
        self.decode_instances = decode_instances
        self.prefill_router = prefill_router
        self.decode_router = decode_router
        self.prefill_ports = prefill_ports
        self.decode_ports = decode_ports
        self.prefill_at = prefill_at
        self.decode_at = decode_at
        #: Share of a link's bandwidth a hand-off achieves (``transfer_efficiency``).
        self.efficiency = efficiency
        #: SGLang's order: the decode worker reserves the call's slot and KV before its prefill.
        self.decode_first = decode_first
        self.on_rejected = None
        self.handoffs = []
        for inst in decode_instances:
            inst.kv_handoff = KvHandoff(inst, self)
            self.handoffs.append(inst.kv_handoff)

    def links_between(self, prefill_worker: int, decode_worker: int) -> list[Link]:
        return transfer_links(self.prefill_ports[prefill_worker], self.prefill_at[prefill_worker],
                              self.decode_ports[decode_worker], self.decode_at[decode_worker])

    def all_links(self) -> list[Link]:
        """The hand-off ports built for hand-offs only (a hierarchy reports its own links)."""
        return [link for ports in self.prefill_ports + self.decode_ports for link in ports.own]

    # --- the router's interface for the simulation --------------------------------------------
    def submit(self, call: LLMRequest) -> None:
        call.remote_prefill = True
        if self.decode_first:
            self.decode_router.submit(call)    # its decode worker's admission starts the prefill
        else:
            self.env.process(self._serve(call, self.prefill_leg(call)))

    def prefill_leg(self, call: LLMRequest) -> LLMRequest:
        """Place ``call``'s prefill leg (a copy with one output token) on a prefill worker."""
        leg = LLMRequest(request_id=call.request_id, session_id=call.session_id, agent_class=call.agent_class,
                         depth=call.depth, call_index=call.call_index, arrival_s=self.env.now,
                         prompt_tokens=call.prompt_tokens, output_tokens=1, prompt_blocks=call.prompt_blocks,
                         total_keys=call.prompt_keys, done=self.env.event(), agent_id=call.agent_id)
        self.prefill_router.submit(leg)
        return leg

    def take_prefill(self, call: LLMRequest, leg: LLMRequest) -> None:
        """Copy what the finished prefill leg did onto the call."""
        call.prefill_worker = leg.instance
        call.admitted_s = leg.admitted_s           # TTFT's queue part is the prefill queue, and its causes
        call.queue_slot_s, call.queue_kv_s = leg.queue_slot_s, leg.queue_kv_s
        call.queue_load_s, call.queue_step_s = leg.queue_load_s, leg.queue_step_s
        call.prefill_done_s = leg.first_token_s
        call.prefill_hit_tokens = leg.hit_tokens
        call.prefill_computed_tokens = leg.prefilled_tokens
        call.prefill_tier_hit_tokens = dict(leg.tier_hit_tokens) if leg.tier_hit_tokens else {"hbm": leg.hit_tokens}
        call.tier_hit_tokens = dict(call.prefill_tier_hit_tokens)

    def _serve(self, call: LLMRequest, leg: LLMRequest):
        yield leg.done
        if leg.rejected:
            call.rejected = True
            call.reject_reason = f"prefill_{leg.reject_reason}"
            call.finish_s = leg.finish_s
            if self.on_rejected is not None:
                self.on_rejected(call)
            return
        self.take_prefill(call, leg)
        self.decode_router.submit(call)

    def prefill_finished(self, leg: LLMRequest) -> None:
        """A prefill leg ended (its first token is out, or it was rejected)."""
        self.prefill_router.on_finish(leg)
        leg.done.succeed()

    def on_finish(self, call: LLMRequest) -> None:
        if call.prefill_worker >= 0 or (self.decode_first and call.instance >= 0):
            if call.rejected and not call.reject_reason.startswith(("decode_", "prefill_")):
                call.reject_reason = f"decode_{call.reject_reason}"   # a decode worker refused it
            self.decode_router.on_finish(call)
