"""``kv_aware``: NVIDIA Dynamo's KV router (``lib/llm/src/kv_router``), the default.

For each worker ``w`` the router computes Dynamo's cost (lower is better)::

    logit_w = overlap_score_weight * potential_prefill_blocks_w + active_blocks_w
    potential_prefill_blocks_w = (prefill_tokens_w + prompt_tokens - overlap_w * block_tokens) / block_tokens

* ``overlap_w``: leading blocks of the prompt that ``w`` holds in the router's *own view* of its
  cache, built from the KV events the workers publish (:class:`KvIndexer`, delivered
  ``event_delay_s`` after they happen), never from the cache itself;
* ``prefill_tokens_w``: prompt tokens still to compute of the requests routed to ``w`` that have
  no first token yet (Dynamo's active prefill tokens, cleared when the first token streams back:
  :meth:`KvAware.on_first_token`, or :meth:`KvAware.on_finish` for a request rejected before it);
* ``active_blocks_w``: prompt blocks of the requests routed to ``w`` and not finished (Dynamo's
  active decode blocks, freed on completion). Not tracked (0) with ``track_active_blocks`` off,
  as Dynamo's prefill router always has it: a prefill worker holds no decode load, and its
  requests end at their first token, so the term would only count their prompts twice.

With ``temperature == 0`` the cheapest worker wins (ties broken at random, as Dynamo does);
otherwise a worker is drawn with probability proportional to
``exp(-(logit - min) / (max - min) / temperature)`` (Dynamo's softmax over normalised logits).
Draws come from the router's own stream of the scenario's ``SeedSequence``, so runs repeat.

Differences from Dynamo, kept on purpose: active blocks count each request's prompt blocks
(Dynamo deduplicates blocks shared between a worker's active sequences and adds the output
blocks as they are generated); the view counts a block held in any tier of a tiered cache
(Dynamo's events come from the GPU cache, or from KVBM's host and disk tiers when it is used).
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from agentsim.cluster.routers.base import Router
from agentsim.cluster.routers.kv_indexer import KvIndexer
from agentsim.cluster.routers.registry import ROUTERS


class KvAwareParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    overlap_score_weight: float = Field(16.0, ge=0, description="weight of the prefill blocks still to compute "
                                        "against the active blocks (Dynamo --kv-overlap-score-weight; 0: load only)")
    temperature: float = Field(0.0, ge=0, description="softmax temperature over normalised costs "
                               "(Dynamo --router-temperature; 0: cheapest worker)")
    track_active_blocks: bool = Field(True, description="add the worker's active decode blocks to its cost "
                                      "(Dynamo --no-track-active-blocks turns it off; always off over a prefill pool)")
    event_delay_s: float = Field(0.005, ge=0, description="time from a worker storing or removing blocks "
                                 "to the router's view showing it, seconds")


@ROUTERS.register("kv_aware")
class KvAware(Router):
    """Dynamo's KV router: overlap-weighted prefill blocks still to compute + active blocks, from KV events."""

    Params = KvAwareParams
    tracks_first_tokens = True

    def __init__(self, instances, params=None, rng=None):
        super().__init__(instances, params, rng)
        self.kv_indexer = KvIndexer(n_workers=1 + max(inst.instance_id for inst in instances))
        self.kv_event_delay_s = self.params.event_delay_s
        self.block_tokens = max(inst.block_tokens for inst in instances)
        n = len(instances)
        self.active_blocks = [0] * n
        self.prefill_tokens = [0] * n
        #: request id -> (worker, its prefill tokens) for routed requests without a first token
        #: yet. Retired when the token is out, not scanned per routing: in an overloaded or large
        #: cluster thousands wait for their first token, and a scan per request was quadratic.
        self._prefilling: dict[int, tuple[int, int]] = {}
        self._blocks_of: dict[int, int] = {}   # request id -> its active blocks
        self.overlap_blocks_routed = 0          # sum of overlap_w of the chosen workers
        self.prompt_blocks_routed = 0
        self._last_overlaps: dict[int, int] | None = None   # from the last choose(), for place()

    @classmethod
    def prefill_pool_params(cls, params: KvAwareParams) -> KvAwareParams:
        """Dynamo's prefill router: the same cost without active blocks."""
        return params.model_copy(update={"track_active_blocks": False})

    def on_first_token(self, request) -> None:
        self._retire_prefill(request)

    def _retire_prefill(self, request) -> None:
        """Drop ``request`` from its worker's prefill load (once: its first token is out, or
        it ended without one)."""
        entry = self._prefilling.pop(request.request_id, None)
        if entry is not None:
            self.prefill_tokens[entry[0]] -= entry[1]

    def costs(self, request) -> tuple[list[float], dict[int, int]]:
        """(Dynamo's logit per worker, overlap blocks per worker) for ``request`` now."""
        overlaps = self.kv_indexer.overlap_blocks(request.prompt_keys)
        block_tokens = self.block_tokens
        weight = self.params.overlap_score_weight / block_tokens
        prompt = request.prompt_tokens
        active = self.active_blocks
        logits = [weight * (tokens + prompt) + active[w] for w, tokens in enumerate(self.prefill_tokens)]
        for w, blocks in overlaps.items():
            logits[w] -= weight * blocks * block_tokens
        return logits, overlaps

    def choose(self, request):
        logits, overlaps = self.costs(request)
        self._last_overlaps = overlaps
        temperature = self.params.temperature
        low = min(logits)
        if temperature == 0.0:
            best = [w for w, logit in enumerate(logits) if logit == low]
            pick = best[0] if len(best) == 1 else best[int(self.rng.integers(len(best)))]
            return self.instances[pick]
        high = max(logits)
        if high == low:
            return self.instances[int(self.rng.integers(len(logits)))]
        scale = 1.0 / ((high - low) * temperature)
        weights = [math.exp(-(logit - low) * scale) for logit in logits]
        total = sum(weights)
        point = self.rng.random() * total
        for w, weight in enumerate(weights):
            point -= weight
            if point < 0.0:
                return self.instances[w]
        return self.instances[-1]

    def place(self, request, instance) -> None:
        w = instance.instance_id
        overlaps = self._last_overlaps
        if overlaps is None:  # placed without choose() (sticky sessions): look the overlap up
            overlaps = self.kv_indexer.overlap_blocks(request.prompt_keys)
        self._last_overlaps = None
        overlap = overlaps.get(w, 0)
        blocks = len(request.prompt_keys)
        self.overlap_blocks_routed += overlap
        self.prompt_blocks_routed += blocks
        if not self.params.track_active_blocks:
            blocks = 0
        prefill = max(0, request.prompt_tokens - overlap * self.block_tokens)
        self.prefill_tokens[w] += prefill
        self._prefilling[request.request_id] = (w, prefill)
        self.active_blocks[w] += blocks
        self._blocks_of[request.request_id] = blocks
        super().place(request, instance)

    def on_finish(self, request) -> None:
        if self._prefilling:
            self._retire_prefill(request)      # ended without a first token (rejected)
        self.active_blocks[request.instance] -= self._blocks_of.pop(request.request_id)
        super().on_finish(request)
