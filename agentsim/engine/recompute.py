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

Memory: what a cache lost is kept per block key as a code (the instance that lost it and the
tier) in up to :data:`DENSE_LAYERS` maps dense over the key allocator's ids
(:class:`~agentsim.cache.key_map.DenseKeyMap`, 2 bytes a key of their span with up to 255
instances, 4 with more: the first instance
that lost the key, the second, ...), plus one dict for keys lost on more instances than that
(shared prefixes, sessions that moved often): key -> the further owners' codes packed into one
int. A dict from key to code cost about 100 bytes a key, and a rack's sessions move between
instances often enough that a second owner is common. Removals by a history rewrite are not
kept (a rewritten key never recurs; the rewrite's positions say what was invalidated). The keys
a rewrite replaced and an ended agent's private keys are forgotten
(:meth:`RecomputeClassifier.forget`: no later call can send them): their records go, every
owner's, and the first layer marks them so that their later losses (lower tiers evict an ended
agent's blocks for hours) are not recorded again; removals of keys already dead at the last
purge are not recorded either. So the record holds the lost keys of live agents and stays flat
over a long run. Nothing is
stored on the hit path: the hooks run on removals (the policies' ``on_remove``), once per
finished request and once per finished agent.
"""

from __future__ import annotations

from array import array

import numpy as np

from agentsim.cache.key_map import DenseKeyMap, distinct

#: A loss record: ``(instance + 1) << 8 | 1 + tier index`` (one int per key).
_TIER_BITS = 8
#: The first layer's mark of a forgotten key (owner 0, never a record's code): its later losses
#: are not recorded. Without it, the lower tiers of a long run kept recording an ended agent's
#: blocks for hours after :meth:`RecomputeClassifier.forget`, and the owners beyond the dense
#: layers (a dict entry each) held them until the oldest live agent ended (a 40-minute rack run:
#: 417k dict entries, 124k of them for dead keys).
_FORGOTTEN = (1 << _TIER_BITS) - 1
#: Bits a code takes in a spilled key's packed codes (see ``RecomputeClassifier._spill``).
_SPILL_CODE_BITS = 32
_SPILL_CODE_MASK = (1 << _SPILL_CODE_BITS) - 1
#: Dense maps of loss codes (the first, second, ... instance to lose a key); owners beyond them
#: go to one dict (``RecomputeClassifier._spill``).
DENSE_LAYERS = 3
#: Key arrays at least this long take the vectorised first-layer pass (:meth:`RecomputeClassifier.
#: _record_in_span`); below it numpy's per-call overhead exceeds the per-key loop's cost.
_VECTOR_MIN_KEYS = 48


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
        #: Layer i: key -> code ``(owner + 1) << 8 | (1 + tier)`` of the (i+1)-th instance to
        #: lose it. A key is set in layers 0..k-1 only (records are removed from all at once).
        #: Codes of up to 255 instances fit in 2 bytes a key of the span ("H"), more in 4.
        owners = 1 + max((inst.instance_id for inst in instances), default=0)
        self._code_type = "H" if owners < (1 << (16 - _TIER_BITS)) else "I"
        self._code_dtype = np.dtype(np.uint16 if self._code_type == "H" else np.uint32)
        #: The first layer's span starts at the oldest live key (purges move it there) and never
        #: re-bases past live keys on its own: caches lose their oldest blocks first, so keys a
        #: re-base had moved to its dict were the ones recorded most (four racks: 296k keys
        #: there, 50 dict lookups per request; 2 bytes a key of the span instead).
        self._layers: list[DenseKeyMap] = [DenseKeyMap(self._code_type, rebase=False)]
        #: Owners beyond the dense layers: key -> their codes packed into one int, 32 bits a
        #: code (an int object a key, not a dict entry per instance and key), so that
        #: :meth:`forget` drops a key's records with one pop.
        self._spill: dict[int, int] = {}
        #: ``() -> (oldest live key, protected keys)`` (the agent driver's ``key_horizon``):
        #: when set, records of dead keys (below the oldest live key, not protected) are purged
        #: whenever the record has doubled, since an ended agent's blocks are still evicted
        #: (and recorded) after it ended.
        self.key_horizon = None
        self._purge_at = 4096
        #: Keys below this that are not in :attr:`_protected` are dead (the horizon at the last
        #: purge: the oldest live key only moves up, and shared prefixes created later get keys
        #: above it), so their removals are not recorded at all: on a long run the lower tiers
        #: evict ended agents' blocks for hours (1.7M such records in a day of four instances,
        #: each a dict entry the next purge dropped again).
        self._dead_below = 0
        self._protected: set[int] | frozenset[int] = frozenset()
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

    def _record(self, instance: int, keys: list[int], tier_index: int) -> None:
        dead_below = self._dead_below
        if keys and keys[0] < dead_below and max(keys) < dead_below and self._protected.isdisjoint(keys):
            return                              # an ended agent's blocks (see _dead_below)
        owner = instance + 1
        code = (owner << _TIER_BITS) | (1 + tier_index)
        first = self._layers[0]
        values, base = first.values, first.base
        size = len(values)
        added = 0
        later = self._layers[1:]
        if len(keys) >= _VECTOR_MIN_KEYS and type(keys) is array and keys.typecode == "q":
            keys = self._record_in_span(keys, owner, code)
        for key in keys:
            # The first layer's array, inline (the common cases: a key lost for the first time,
            # or again by the same instance).
            i = key - base
            if 0 <= i < size:
                held = values[i]
                if not held:
                    values[i] = code
                    added += 1
                    continue
                if held >> _TIER_BITS == owner:
                    values[i] = code
                    continue
                if held == _FORGOTTEN:
                    continue
            else:
                if i < 0 and key < self._dead_below and key not in self._protected:
                    continue                    # a dead key: no call can send it again
                if self.key_horizon is not None and first.grows_for(key):
                    # Drop the dead keys below the oldest live one before the span doubles:
                    # otherwise it doubles over them (purges follow the count, not the span).
                    first.count += added
                    added = 0
                    self._purge()
                    values, base = first.values, first.base
                    size = len(values)
                held = first.get(key)
                if held == _FORGOTTEN:
                    continue
                if not held or held >> _TIER_BITS == owner:
                    first.count += added      # set() may re-base, which reads the count
                    added = 0
                    first.set(key, code)
                    values, base = first.values, first.base
                    size = len(values)
                    continue
            for layer in later:
                # DenseKeyMap.get and the in-span case of set, inline: on four racks, with more
                # instances losing the same shared keys, the lookup was a tenth of the record's
                # time; a day of the rack sets a few dozen keys per request here.
                j = key - layer.base
                layer_values = layer.values
                inside = 0 <= j < len(layer_values)
                held = layer_values[j] if inside else layer.far.get(key, 0)
                if not held or held >> _TIER_BITS == owner:
                    if inside:
                        if not held:
                            layer.count += 1
                        layer_values[j] = code
                    else:
                        layer.set(key, code)
                    break
            else:
                if len(self._layers) < DENSE_LAYERS:
                    # A later layer's keys are a sparse subset of the first's: its span starts
                    # as the first's (not at its first key, which would leave the keys below
                    # it to the dict) and follows the first's through purges, never re-basing
                    # on its own.
                    layer = DenseKeyMap(self._code_type, rebase=False)
                    layer.cover(first.base, first.base + len(first.values))
                    layer.set(key, code)
                    self._layers.append(layer)
                    later = self._layers[1:]
                else:
                    self._spill[key] = _with_code(self._spill.get(key, 0), owner, code)
        first.count += added
        if len(first) > self._purge_at and self.key_horizon is not None:
            self._purge()

    def _record_in_span(self, keys: array, owner: int, code: int):
        """The first layer's common cases of :meth:`_record` for a long key array, at once: keys
        inside the first layer's span that are unset there or lost before by the same instance
        get ``code``. Returns the keys left to the per-key loop (outside the span, or held by
        another instance), in their order; the result is the loop's, since every key touches
        its own slot. A long tail (a whole node evicted, a lower tier dropping a run) then costs
        a few array operations rather than a Python iteration a key."""
        first = self._layers[0]
        base, size = first.base, len(first.values)
        as_ints = np.frombuffer(keys, dtype=np.int64)
        wanted = as_ints - base
        if wanted.min() < 0 or wanted.max() >= size:
            return keys                           # some keys outside the span: the loop does all
        view = np.frombuffer(first.values, dtype=self._code_dtype)
        held = view[wanted]
        unset = held == 0
        settable = unset | ((held >> _TIER_BITS) == owner)
        view[wanted[settable]] = code
        if unset.any():
            # Slots newly set, each once (a removal may name a key twice).
            first.count += int(distinct(wanted[unset]).size)
        del view                                  # the array cannot grow while exported
        left = ~settable & (held != _FORGOTTEN)
        if not left.any():
            return ()
        return as_ints[left].tolist()

    def _purge(self) -> None:
        oldest, protected = self.key_horizon()
        self._dead_below, self._protected = oldest, protected
        for layer in self._layers:
            layer.drop_below(oldest, protected)
        self._spill = {k: v for k, v in self._spill.items() if k >= oldest or k in protected}
        self._purge_at = max(4096, 2 * len(self._layers[0]))

    def forget(self, keys: list[int]) -> None:
        """``keys`` can never be requested again (their agent ended, or a rewrite replaced them):
        drop their loss records, and mark them forgotten in the first layer so that their later
        losses (the lower tiers of a long run evict an ended agent's blocks for hours) are not
        recorded again. Spilled records go with the last layer's: a key spills only when every
        dense layer holds it."""
        first, *later = self._layers
        if not first.count:
            return
        first.fill_many(keys, _FORGOTTEN)
        popped = ()                      # the keys the last layer held
        for layer in later:
            popped = layer.pop_many(keys)
        if self._spill and len(later) == DENSE_LAYERS - 1:
            pop = self._spill.pop
            for key in popped:
                pop(key, None)

    def _tiers_lost(self, instance: int, keys: list[int]) -> list[int]:
        """For each of ``keys``: 1 + the tier ``instance`` lost it from, or 0 if it never did."""
        owner = instance + 1
        first, *later = self._layers
        values, base = first.values, first.base
        size = len(values)
        # Nothing is set here, so each later layer's span and dict hold for the whole call.
        later = [(layer.base, layer.values, len(layer.values), layer.far) for layer in later]
        spill = self._spill
        out = []
        for key in keys:
            i = key - base
            held = values[i] if 0 <= i < size else first.get(key)
            if not held:
                out.append(0)                  # later layers hold a key only if the first does
                continue
            if held >> _TIER_BITS == owner:
                out.append(held & 0xFF)
                continue
            tier = 0
            for layer_base, layer_values, layer_size, layer_far in later:
                j = key - layer_base          # DenseKeyMap.get, inline (as in _record)
                held = layer_values[j] if 0 <= j < layer_size else layer_far.get(key, 0)
                if not held:
                    break
                if held >> _TIER_BITS == owner:
                    tier = held & 0xFF
                    break
            else:
                tier = _spilled_tier(spill.get(key, 0), owner)
            out.append(tier)
        return out

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
        any_lost = self._layers[0].count > 0
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
        """Memory held by the record (the dense maps' arrays; 100 bytes a key for dicts)."""
        return sum(layer.state_bytes() for layer in self._layers) + 100 * len(self._spill)


def _with_code(packed: int, owner: int, code: int) -> int:
    """A spilled key's packed codes with ``owner``'s code set to ``code`` (replaced if ``owner``
    had one, appended otherwise)."""
    shift = 0
    rest = packed
    while rest:
        if (rest & _SPILL_CODE_MASK) >> _TIER_BITS == owner:
            return packed & ~(_SPILL_CODE_MASK << shift) | (code << shift)
        rest >>= _SPILL_CODE_BITS
        shift += _SPILL_CODE_BITS
    return packed | (code << shift)


def _spilled_tier(packed: int, owner: int) -> int:
    """1 + the tier ``owner`` lost a spilled key from (its code in ``packed``), or 0."""
    while packed:
        held = packed & _SPILL_CODE_MASK
        if held >> _TIER_BITS == owner:
            return held & 0xFF
        packed >>= _SPILL_CODE_BITS
    return 0
