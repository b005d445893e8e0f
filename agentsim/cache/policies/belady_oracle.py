"""Belady agent-oracle (policies spec section 3.13 (b)): clairvoyant eviction in the closed loop.

``belady`` (:mod:`agentsim.cache.policies.belady`) is MIN over a recorded request stream
(replay-OPT, spec 3.13 (a)). In a timed run the future depends on the run itself, so this
policy uses what the engine knows exactly instead: every paused agent's next call time.

* **Next use of a cached node** = the earliest known next-call time among the agents whose
  live path passes through it. A paused agent (``on_tool_start(owner, node, gap_s, now_s)``)
  calls again at ``now_s + gap_s``: the engine pre-samples the tool/human gap
  (``request.next_gap_s``), so the time is exact, not a prediction. A returned agent
  (``on_tool_end(owner, now_s)``) has a queued request: its next use is its arrival time
  ``now_s`` (due now) until that request's MATCH touches the agent's node (the request then
  holds the path by its own pin) or the call ends (``on_tool_start`` again, whatever follows).
* Evictable nodes are leaves, and an agent's path passes through a leaf only if the leaf is
  the agent's deepest cached node, which is exactly the owner tracking of
  :class:`~agentsim.cache.policies.kvflow.KVFlow` (this class reuses it: owners move to the
  parent when their deepest node is evicted whole).
* **Victim** = the evictable leaf with the furthest next use. Nodes no known agent will use
  next have next use infinity and go first. Ties (in practice: within the infinity class)
  are broken by LRU (``last_access_s``), then deepest first (``-end_block``), then node id.
  [sim-choice] LRU before "deepest": with no agent information at all (cache-only replays,
  runs without tool events, ``use_workflow: false``) the order is then exactly LRU, and a
  run does not switch the order of its unknown nodes whenever some agent pauses.
* **Every call announces the next one** (``announced_gap_kinds``), not only pauses: after a
  sub-agent join or a call with an unknown stop (WEKA's empty ``stop``) the replay gives the
  agent's next call time when it knows it (cache-only replay: always; timed runs: open-loop),
  and after an agent's last call "none known" (gap NaN), which ends its "due now".
  [sim-choice, issue #22] Told of tool and human pauses only, the oracle kept a returned agent
  "due now" for ever when its call did not touch the agent's node (547 of the sessions' 7,950
  follow-up calls do not re-send the previous prompt whole: its last block or an earlier part
  changed, so the match splits the agent's node and leaves the tail, with the agent on it,
  beside the path) and no pause followed: the stale entry ranked as the most
  urgent and, by the leaf rule, kept the agent's whole old context; and it ranked an agent's
  context after an unknown stop as "never used again", ahead of agents returning hours
  later. On the 119 Claude Code sessions 300 s apart at 20,000 blocks that gave 79.64%
  against LRU's 90.60%; ending stale entries alone gives 92.25%, with the next calls after
  unknown stops 93.37% (``belady``: 93.56%).

This is **not guaranteed optimal**: evictions change hits, hits change service times, and
service times change when agents call again (feedback); future sessions and new agents are
unknown (infinity). It is the "clairvoyant scheduler" upper reference for the online agentic
policies (KVFlow, Continuum, TTL-pin), not an offline bound; the offline bound of a run's
own stream stays the ``belady`` replay (``belady_headroom`` in the run diagnostics).

Cost: as KVFlow, an O(L) scan over the L evictable leaves per eviction while some agent is
paused or queued (keys depend on agent state), LRU's lazy heap otherwise.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from agentsim.cache.registries import EVICTION_POLICIES
from agentsim.cache.policies.kvflow import KVFlow, _node

NEVER = math.inf


class BeladyOracleParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    use_workflow: bool = Field(True, description="false: ignore the agents' next-call times (= LRU)")


@EVICTION_POLICIES.register("belady_oracle")
class BeladyOracle(KVFlow):
    """Evict the leaf whose next known use (an agent's next call) is furthest; unknown = first."""

    Params = BeladyOracleParams
    #: A partly evicted leaf keeps its identity (node id, owners): the key is re-read from the
    #: shortened run, as LRU does, so the no-information order is exactly LRU's.
    trim_in_place = True
    #: Told of an agent's next call after any kind of gap whose length the replay knows (see
    #: the module docstring: an unknown stop is not "never again").
    announced_gap_kinds = ("tool", "human", "join", "")

    def __init__(self, params=None):
        super().__init__(params)
        self._queued: set = set()   # owners whose pause ended and whose next call is not yet matched

    # --- agent state ---------------------------------------------------------------------------
    def _forget(self, owner, now_s: float) -> None:
        self._queued.discard(owner)
        KVFlow.on_tool_end(self, owner, now_s)

    def on_tool_start(self, owner, node, predicted_gap_s, now_s, tool="tool"):
        self._forget(owner, now_s)
        if not self.params.use_workflow or not math.isfinite(predicted_gap_s):
            return
        n = _node(node)
        self._agents[owner] = [n, now_s + predicted_gap_s]
        self._at.setdefault(n, set()).add(owner)

    def on_tool_end(self, owner, now_s):
        record = self._agents.get(owner)
        if record is None:
            return
        # The next call is submitted now: its arrival time is the path's next use (spec 3.13 b).
        record[1] = now_s
        self._queued.add(owner)
        self._heap_valid = False

    # While no owner is queued, on_access is KVFlow's, so KVFlow's path-touch shortcuts hold
    # (the cache reads these before every path-touch; on_access only empties the queue).
    @property
    def access_leaf_only(self) -> bool:
        return self._plain_leaf_rule and not self._queued

    @property
    def access_evictable_only(self) -> bool:
        return not self._queued

    def on_access(self, node, now_s, hit=False):
        super().on_access(node, now_s, hit)
        if hit and self._queued:
            owners = self._at.get(_node(node))
            if owners:
                for owner in [o for o in owners if o in self._queued]:
                    self._forget(owner, now_s)

    def on_remove(self, node, blocks, reason):
        super().on_remove(node, blocks, reason)
        if self._queued:
            # An owner whose path left the cache entirely is no longer tracked.
            self._queued.intersection_update(self._agents)

    # --- the order ---------------------------------------------------------------------------------
    def next_use_s(self, node) -> float:
        """Earliest known next-call time (s) of the agents whose deepest cached node is ``node``;
        infinity when no known agent will use it next."""
        owners = self._at.get(_node(node))
        if not owners:
            return NEVER
        agents = self._agents
        return min(agents[owner][1] for owner in owners)

    def hold(self, node, now_s: float) -> float:
        """Seconds until ``node``'s next known use (infinity when unknown); for diagnostics."""
        return max(0.0, self.next_use_s(node) - now_s)

    def key(self, entry, now_s: float) -> tuple:
        return (-self.next_use_s(entry) if self._at else -NEVER,
                entry.last_access_s, -entry.end_block, entry.node_id)

    def describe(self):
        out = super().describe()
        out["queued_agents"] = len(self._queued)
        return out
