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

Memory and cost: what each instance lost is kept as runs of consecutive block keys with the
tier they were last lost from (:class:`~agentsim.engine.loss_runs.BucketedLossRuns`, one per instance):
the key allocator hands out keys in runs and a removal takes a node's tail, so a removal is a
few run assignments however many keys it has, and a run costs a few hundred bytes however long.
(A per-key record, dense over the allocator's ids in layers by owner, cost a quarter to a third
of a rack's event loop on its Python step per removed key, and 0.55 KB of memory per request.)
Removals by a history rewrite are not kept (a rewritten key never recurs; the rewrite's positions
say what was invalidated). Keys no call can send again are not asked about, so what they hold
does not matter; the runs of dead keys (in no live agent's context and no shared prefix) are
dropped whenever the runs have doubled, and removals of keys already dead at the last purge are
not recorded. Nothing is stored on the hit path: the hooks run on removals (the policies'
``on_remove``) and once per finished request.
"""

from __future__ import annotations

from bisect import bisect_right

from agentsim.engine.loss_runs import BucketedLossRuns
from agentsim.workload.key_runs import key_runs

#: Runs recorded before the first purge of dead keys; later purges wait until the runs double.
_FIRST_PURGE_RUNS = 4096


def _removed_keys(obj, blocks: int):
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
        #: instance id -> the runs of keys it lost, with 1 + the tier lost from last.
        self._lost: dict[int, BucketedLossRuns] = {}
        #: ``() -> (live runs, top)`` (the agent driver's ``live_keys``): the keys a live agent can
        #: still send, as sorted disjoint runs, and the next key the allocator hands out. When
        #: set, the runs of dead keys (below ``top``, in no live run) are dropped whenever the
        #: runs have doubled, since an ended agent's blocks are still evicted (and recorded)
        #: after it ended.
        self.live_keys = None
        self._purge_at = _FIRST_PURGE_RUNS
        self._runs = 0
        #: The live runs and ``top`` at the last purge: a key below ``top`` in none of them was
        #: dead then and stays dead (an agent's history only grows, or is rewritten with new
        #: keys), so runs wholly of such keys are not recorded at all: on a long run the lower
        #: tiers evict ended agents' blocks for hours.
        self._live_starts: list[int] = []
        self._live_ends: list[int] = []
        self._dead_top = 0
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
            if reason != "mutation":     # a rewritten key never recurs
                record(instance, _removed_keys(obj, blocks), tier_index)
            _original(obj, blocks, reason)

        policy.on_remove = on_remove

    def _record(self, instance: int, keys, tier_index: int) -> None:
        """``instance`` lost ``keys`` from tier ``tier_index``."""
        if not len(keys):
            return
        lost = self._lost.get(instance)
        if lost is None:
            lost = self._lost[instance] = BucketedLossRuns()
        before = len(lost)
        code = 1 + tier_index
        dead_top = self._dead_top
        live_starts, live_ends = self._live_starts, self._live_ends
        assign = lost.assign
        for start, end in key_runs(keys):
            if end <= dead_top:
                # Dead if no key of [start, end) was live at the last purge: the last live run
                # starting before ``end`` ends by ``start``. Inline: a removal has one run per
                # call of a session, and this runs for each.
                i = bisect_right(live_starts, end - 1) - 1
                if i < 0 or live_ends[i] <= start:
                    continue                      # an ended agent's blocks (see _dead_top)
            assign(start, end, code)
        self._runs += len(lost) - before
        if self._runs > self._purge_at and self.live_keys is not None:
            self._purge()

    def _purge(self) -> None:
        (self._live_starts, self._live_ends), self._dead_top = self.live_keys()
        for lost in self._lost.values():
            lost.keep_live(self._live_starts, self._live_ends, self._dead_top)
        self._runs = sum(len(lost) for lost in self._lost.values())
        self._purge_at = max(_FIRST_PURGE_RUNS, 2 * self._runs)

    def _tiers_lost(self, instance: int, keys) -> list[int]:
        """For each of ``keys``: 1 + the tier ``instance`` lost it from, or 0 if it never did."""
        lost = self._lost.get(instance)
        if lost is None:
            return [0] * len(keys)
        return lost.codes(key_runs(keys))

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
        lost = self._lost.get(request.instance)
        any_lost = lost is not None and len(lost) > 0
        if not missed or (not any_lost and not rewritten):
            return recomputed, 0, 0
        # Plain Python over the missed blocks: a request misses a few dozen at most, where
        # numpy's fixed cost per call (array, mask, unique) was the open-loop replay's top
        # function.
        if any_lost:
            tiers = self._tiers_lost(request.instance, missed)
            lost_by_tier: dict[int, int] = {}
            for tier in tiers:
                if tier:
                    lost_by_tier[tier] = lost_by_tier.get(tier, 0) + 1
            lost_blocks = sum(lost_by_tier.values())
        else:
            tiers, lost_by_tier, lost_blocks = None, {}, 0
        invalid_blocks = 0
        if rewritten:
            # Positions first .. first + len(missed) - 1 inside the rewrite's [start, end).
            low = max(rewrite[1] - first, 0)
            high = min(rewrite[2] - first, len(missed))
            if high > low:
                invalid_blocks = high - low if tiers is None else tiers[low:high].count(0)
        evicted = lost_blocks * block
        invalidated = invalid_blocks * block
        if evicted and request.arrival_s >= self.warmup_s:
            for tier in sorted(lost_by_tier):
                index = tier - 1
                name = self.tier_names[index] if index < len(self.tier_names) else f"tier{index}"
                self.evicted_by_tier_tokens[name] = (self.evicted_by_tier_tokens.get(name, 0)
                                                     + lost_by_tier[tier] * block)
        return recomputed - evicted - invalidated, evicted, invalidated

    def state_bytes(self) -> int:
        """Bytes the record's runs hold (their arrays and buckets)."""
        return sum(lost.state_bytes() for lost in self._lost.values())
