"""A1 admission filters: keep a released run in the cache, or free it at once (spec 1.9, 3.10).

Set ``cache.admission = ADMISSION_FILTERS.get(name)(params)``; at unpin the cache asks
``admit(node, cache)`` for every released childless run and frees rejected ones immediately
(eviction reason ``admission``). A run still in use by another request is never asked.
``admit_all`` reproduces the unfiltered run exactly.

* ``second_hit`` (vLLM's offload reuse filter, ``store_threshold = 2``): keep a run only once
  the block it starts with has been released at least ``threshold`` times, counted in a bounded
  LRU table of ``table_entries`` keys. The first block is what a real filter sees again: the
  first block a request brings beyond the cached prefix. A session's next call recomputes a
  rejected run from the same block, so its second release is kept; the run's deepest block
  (the newest output) is new on every call and would never reach the threshold.
* ``no_decode_cache`` (do not cache decode): only the prompt's blocks are committed after a
  call; the blocks holding generated tokens are freed when the request ends, so an agent's next
  call recomputes its previous output. The serving instance asks ``caches_decode``.
* ``no_prefix_cache`` (prefix caching off: vLLM ``--no-enable-prefix-caching``, SGLang
  ``--disable-radix-cache``, TensorRT-LLM ``enable_block_reuse: false``): every released run is
  freed at once, so no block is ever hit again, not even by a preempted request's re-admission
  (it recomputes its prompt and output so far).
* ``tinylfu``: keep a run while the cache has free room; otherwise only if its TinyLFU
  estimate beats the estimate of the run the eviction policy would evict next (its
  ``peek_victim``; admitted if the policy cannot say). The sketch counts each release.
"""

from __future__ import annotations

from collections import OrderedDict

from pydantic import BaseModel, ConfigDict, Field

from agentsim.cache.policies._sketch import FrequencySketch
from agentsim.cache.registries import ADMISSION_FILTERS


class AdmissionFilter:
    Params = None
    registered_name = "?"
    #: Whether a finished request's decode (output) blocks are committed to the cache at all.
    caches_decode = True

    def __init__(self, params: BaseModel | None = None):
        self.params = params if params is not None else (self.Params() if self.Params else None)
        self.rejected_blocks = 0

    def admit(self, node, cache) -> bool:
        raise NotImplementedError

    def _verdict(self, node, keep: bool) -> bool:
        if not keep:
            self.rejected_blocks += len(node.keys)
        return keep


@ADMISSION_FILTERS.register("admit_all")
class AdmitAll(AdmissionFilter):
    """Keep everything (the unfiltered baseline)."""

    def admit(self, node, cache):
        return True


@ADMISSION_FILTERS.register("no_decode_cache")
class NoDecodeCache(AdmissionFilter):
    """Do not cache decode KV: keep a call's prompt blocks, free its output blocks."""

    caches_decode = False

    def admit(self, node, cache):
        return True


@ADMISSION_FILTERS.register("no_prefix_cache")
class NoPrefixCache(AdmissionFilter):
    """Keep nothing: every released run is freed (prefix caching off)."""

    def admit(self, node, cache):
        return self._verdict(node, False)


class SecondHitParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    threshold: int = Field(2, ge=1, description="releases of a run's first block before it is kept")
    table_entries: int = Field(64000, gt=0, description="LRU table size (keys)")


@ADMISSION_FILTERS.register("second_hit")
class SecondHit(AdmissionFilter):
    """Keep a run from its ``threshold``-th use on."""

    Params = SecondHitParams

    def __init__(self, params=None):
        super().__init__(params)
        self._seen: OrderedDict[int, int] = OrderedDict()

    def admit(self, node, cache):
        key = node.keys[0]  # where the run starts: the same on the call that brings it back
        count = self._seen.pop(key, 0) + 1
        self._seen[key] = count
        if len(self._seen) > self.params.table_entries:
            self._seen.popitem(last=False)
        return self._verdict(node, count >= self.params.threshold)


class TinyLFUAdmissionParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sample_factor: float = Field(10.0, gt=0, description="sketch halves after sample_factor x capacity counts")


@ADMISSION_FILTERS.register("tinylfu")
class TinyLFUAdmission(AdmissionFilter):
    """Admit a released run only if it is more frequent than the next victim."""

    Params = TinyLFUAdmissionParams

    def __init__(self, params=None):
        super().__init__(params)
        self.sketch: FrequencySketch | None = None

    def admit(self, node, cache):
        if self.sketch is None:
            cap = cache.capacity_blocks
            self.sketch = FrequencySketch(cap, int(self.params.sample_factor * cap))
        self.sketch.increment(node.keys[-1], 1, len(node.keys))  # a run's blocks: its accesses
        if cache.used_blocks < cache.capacity_blocks:
            return True
        victim = cache.policy.peek_victim()
        if victim is None or victim is node:
            return True
        return self._verdict(node, self.sketch.estimate(node.keys[-1]) > self.sketch.estimate(victim.keys[-1]))
