"""Why a request's prompt tokens were recomputed: cold, evicted (by tier) or invalidated.

``recomputed_tokens = prompt_tokens - hit_tokens`` counts every prompt token prefill computed,
including tokens no cache could have held. :class:`RecomputeClassifier` splits it, per request:

* ``evicted``: full prompt blocks this instance's cache held once and lost (capacity eviction,
  TTL expiry, a pin time-out, an admission filter, an orphaned subtree: any removal but a
  history rewrite), by the tier it was lost from last (a block demoted from HBM to DRAM and then
  dropped by DRAM counts under ``dram``);
* ``invalidated``: full prompt blocks at positions whose cached KV a history rewrite
  (compaction, edit) of the same agent on the same instance made stale since its previous call
  (their keys are new, so they were never cached as such), and blocks removed by a rewrite;
* ``cold``: the rest: blocks never cached on this instance (first calls, new text, a session
  moved to another instance), the prompt's partial last block (only full blocks are cacheable)
  and the one token an engine computes even on a full hit.

The three sum to ``recomputed_tokens`` (checked with ``run.check_invariants``).

Memory: what a cache lost is kept in two arrays indexed by block key (the key allocator hands
out consecutive ints): ``fate`` (uint8, how the key was lost last) and ``lost_on`` (int16, the
first instance that lost it): 3 bytes per allocated key, about 24 MB for 8 million keys. A key
lost on a second instance (a shared prefix) goes to that instance's dict instead, and so does a
key outside ``[0, 2**31)`` (trace hash ids), so the record is exact. Nothing is stored on the hit
path: the hooks run on removals (the policies' ``on_remove``) and once per finished request.
"""

from __future__ import annotations

import numpy as np

#: Keys at or above this go to the per-instance dicts instead of the arrays.
ARRAY_KEY_LIMIT = 2 ** 31
#: ``fate`` codes: 0 never lost; else 1 + 2 * tier index, plus 1 for a history rewrite.
NEVER_LOST = 0


def _code(tier_index: int, reason: str) -> int:
    return 1 + 2 * tier_index + (1 if reason == "mutation" else 0)


def _removed_keys(obj, blocks: int) -> list[int]:
    """The keys an ``on_remove(obj, blocks, reason)`` call removes: the tail of the node (a
    tier's entry carries its node)."""
    node = getattr(obj, "node", obj)
    keys = node.keys
    return keys[-blocks:] if blocks < len(keys) else keys


class RecomputeClassifier:
    """Records what each instance's cache lost and splits each finished request's recompute
    (see the module docstring). ``tier_names``: the tiers of the instances' caches, HBM first."""

    def __init__(self, instances: list, block_tokens: int, warmup_s: float):
        self.block_tokens = block_tokens
        self.warmup_s = warmup_s
        self._fate = np.zeros(0, dtype=np.uint8)
        self._lost_on = np.zeros(0, dtype=np.int16)
        self._spill: dict[int, dict[int, int]] = {}
        self._lost_any = False
        tiers_of = [list(getattr(inst.cache, "tiers", None) or [inst.cache]) for inst in instances]
        self.tier_names = [tier.name for tier in tiers_of[0]] if tiers_of else ["hbm"]
        #: Evicted tokens of measured requests (arrival after the warm-up), by tier lost from.
        self.evicted_by_tier_tokens = {name: 0 for name in self.tier_names}
        for inst, tiers in zip(instances, tiers_of):
            for index, tier in enumerate(tiers):
                self._watch(tier.policy, inst.instance_id, index)

    def _watch(self, policy, instance: int, tier_index: int) -> None:
        original = policy.on_remove
        record = self._record

        def on_remove(obj, blocks, reason, _original=original):
            record(instance, _removed_keys(obj, blocks), tier_index, reason)
            _original(obj, blocks, reason)

        policy.on_remove = on_remove

    def _grow(self, size: int) -> None:
        new_size = max(size, 2 * len(self._fate), 1024)
        fate = np.zeros(new_size, dtype=np.uint8)
        lost_on = np.zeros(new_size, dtype=np.int16)
        fate[: len(self._fate)] = self._fate
        lost_on[: len(self._lost_on)] = self._lost_on
        self._fate, self._lost_on = fate, lost_on

    def _record(self, instance: int, keys: list[int], tier_index: int, reason: str) -> None:
        if not keys:
            return
        self._lost_any = True
        code = _code(tier_index, reason)
        owner = instance + 1
        arr = np.asarray(keys, dtype=np.int64)
        in_range = (arr >= 0) & (arr < ARRAY_KEY_LIMIT)
        if not in_range.all():
            spill = self._spill.setdefault(instance, {})
            for key in arr[~in_range].tolist():
                spill[key] = code
            arr = arr[in_range]
            if not len(arr):
                return
        top = int(arr.max()) + 1
        if top > len(self._fate):
            self._grow(top)
        holders = self._lost_on[arr]
        mine = (holders == 0) | (holders == owner)
        self._lost_on[arr[mine]] = owner
        self._fate[arr[mine]] = code
        if not mine.all():
            spill = self._spill.setdefault(instance, {})
            for key in arr[~mine].tolist():
                spill[key] = code

    def _codes(self, instance: int, keys: list[int]) -> np.ndarray:
        """How each of ``keys`` was lost on ``instance`` (0: never)."""
        arr = np.asarray(keys, dtype=np.int64)
        codes = np.zeros(len(arr), dtype=np.int64)
        size = len(self._fate)
        inside = (arr >= 0) & (arr < size)
        idx = arr[inside]
        codes[inside] = np.where(self._lost_on[idx] == instance + 1, self._fate[idx], 0)
        spill = self._spill.get(instance)
        if spill:
            for i in np.flatnonzero(codes == 0).tolist():
                codes[i] = spill.get(int(arr[i]), 0)
        return codes

    def classify(self, request) -> tuple[int, int, int]:
        """(cold, evicted, invalidated) recomputed prompt tokens of a finished ``request``; they
        sum to ``prompt_tokens - hit_tokens``. Adds its evicted tokens by tier to
        :attr:`evicted_by_tier_tokens` if it arrived after the warm-up."""
        recomputed = request.prompt_tokens - request.hit_tokens
        if request.rejected or recomputed <= 0:
            return max(recomputed, 0), 0, 0
        block = self.block_tokens
        first = -(-request.hit_tokens // block)       # the first block not (even partly) hit
        missed = request.prompt_keys[first:]
        rewrite = request.rewrite
        rewritten = bool(rewrite) and rewrite[0] == request.instance and rewrite[2] > first
        if not missed or (not self._lost_any and not rewritten):
            return recomputed, 0, 0
        codes = self._codes(request.instance, missed) if self._lost_any else np.zeros(len(missed), dtype=np.int64)
        invalid = (codes > 0) & (codes % 2 == 0)
        if rewritten:
            positions = np.arange(first, first + len(missed))
            invalid |= (codes == 0) & (positions >= rewrite[1]) & (positions < rewrite[2])
        lost = (codes > 0) & ~invalid
        evicted = int(lost.sum()) * block
        invalidated = int(invalid.sum()) * block
        if evicted and request.arrival_s >= self.warmup_s:
            tiers = (codes[lost] - 1) // 2
            for index, count in zip(*np.unique(tiers, return_counts=True)):
                name = self.tier_names[int(index)] if int(index) < len(self.tier_names) else f"tier{int(index)}"
                self.evicted_by_tier_tokens[name] = self.evicted_by_tier_tokens.get(name, 0) + int(count) * block
        return recomputed - evicted - invalidated, evicted, invalidated

    def state_bytes(self) -> int:
        """Memory held by the record (arrays plus an estimate of 100 bytes a spilled key)."""
        return int(self._fate.nbytes + self._lost_on.nbytes) + 100 * sum(len(d) for d in self._spill.values())
