"""W-TinyLFU (Einziger, Friedman, Manes, ACM TOS 2017; policies spec section 3.10).

A window LRU (``window_ratio`` of capacity, 1%) in front of a main SLRU (probation 20% /
protected 80% of the main part). New runs enter the window. When the window is over its
size, its LRU run is the *candidate*: if the main part has room it simply moves to probation;
otherwise it competes with the main victim (probation LRU, else protected LRU) and the one
with the lower TinyLFU estimate is evicted (the candidate loses ties). A probation hit
promotes to protected; protected overflow demotes to probation MRU.
[sim-choice] Frequency is counted per run: the sketch is keyed by a run's deepest block key
(all blocks of a run are always accessed together), incremented on each insert and each hit;
a split copies the count to the new upper run's deepest key. The sketch's reset period counts
block accesses (a run access is ``len(run)`` of them), as a per-block sketch's would.
``window_ratio: 1.0`` is LRU.
"""

from __future__ import annotations

from pydantic import Field

from agentsim.cache.registries import EVICTION_POLICIES
from agentsim.cache.policies._queues import Queue, QueueParams, QueuePolicy
from agentsim.cache.policies._sketch import FrequencySketch


class WTinyLFUParams(QueueParams):
    window_ratio: float = Field(0.01, gt=0, le=1, description="window LRU size as a fraction of capacity")
    protected_ratio: float = Field(0.8, ge=0, le=1, description="protected share of the main SLRU")
    sample_factor: float = Field(10.0, gt=0, description="sketch halves after sample_factor x capacity increments")


@EVICTION_POLICIES.register("w_tinylfu")
class WTinyLFU(QueuePolicy):
    """Window LRU + TinyLFU-admitted segmented main."""

    Params = WTinyLFUParams

    def __init__(self, params=None):
        super().__init__(params)
        self.window = Queue("window")
        self.probation = Queue("probation")
        self.protected = Queue("protected")

    def bind(self, cache):
        super().bind(cache)
        cap = cache.capacity_blocks
        self.window_cap = min(cap, max(1, int(round(cap * self.params.window_ratio))))
        self.main_cap = cap - self.window_cap
        self.protected_cap = int(self.main_cap * self.params.protected_ratio)
        self.sketch = FrequencySketch(cap, int(self.params.sample_factor * cap))

    def _count(self, node):
        keys = node.keys
        self.sketch.increment(keys[-1], 1, len(keys))

    def _estimate(self, node) -> int:
        return self.sketch.estimate(node.keys[-1])

    def _admit_new(self, node, now_s):
        self._count(node)
        self._place(node, self.window)
        parent = node.parent
        if self._leaf_only and parent is not None and parent.policy_data is not None \
                and parent.policy_data.queue is self.window:
            # The parent is no longer a leaf, so it can never leave the window as a candidate
            # (leaf_only evicts leaves only): kept there, such runs filled the window (12,654
            # blocks against a 500-block target on the Claude Code sessions at 50K blocks) and
            # every eviction fell through to the main. A run that a newer run extends has been
            # used again: it moves to probation, as a per-block window would pass it on.
            self._place(parent, self.probation)

    def on_split(self, upper, lower):
        super().on_split(upper, lower)
        if lower.policy_data is not None:
            self.sketch.increment(upper.keys[-1], self.sketch.estimate(lower.keys[-1]), 0)

    def _on_trimmed(self, node, blocks):
        # As a split would: the remaining run's new deepest key takes the run's count.
        self.sketch.increment(node.keys[-blocks - 1], self.sketch.estimate(node.keys[-1]), 0)

    def on_access(self, node, now_s, hit=False):
        # Overrides QueuePolicy.on_access, not its _on_touch hook: one frame less
        # (it runs twice per node of every path).
        entry = node.policy_data
        if entry is None or entry.queue is None:
            return
        queue = entry.queue
        if hit:
            keys = node.keys
            self.sketch.increment(keys[-1], 1, len(keys))  # _count(node)
            if queue is self.probation:
                self._place(node, self.protected)
                while self.protected.blocks > self.protected_cap:
                    demoted = self._front(self.protected)
                    if demoted is None:
                        break
                    self._place(demoted, self.probation)
                return
        self._place(node, queue)

    def _main_victim(self):
        return self._front(self.probation) or self._front(self.protected)

    def _select(self, now_s):
        while self.window.blocks > self.window_cap:
            candidate = self._front(self.window)
            if candidate is None:
                break
            if self.probation.blocks + self.protected.blocks + len(candidate.keys) <= self.main_cap:
                self._place(candidate, self.probation)
                continue
            victim = self._main_victim()
            if victim is None:
                return candidate
            if self._estimate(candidate) > self._estimate(victim):
                self._place(candidate, self.probation)
                return victim
            return candidate
        return self._main_victim() or self._front(self.window)

    def _eviction_order(self):
        return [self.probation, self.protected, self.window]

    def state_bytes(self):
        return self.sketch.state_bytes()
