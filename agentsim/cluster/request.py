"""The request a serving instance receives: one LLM call of one agent."""

from __future__ import annotations

from dataclasses import dataclass, field

import simpy


@dataclass(slots=True, eq=False)
class LLMRequest:
    """An LLM call. ``total_keys`` are the full-block keys of prompt plus output (the KV the call
    leaves behind for the agent's next call); the prompt's full blocks are its first
    ``prompt_blocks`` (:attr:`prompt_keys`).

    One copy of the keys per request: the prompt's keys are a prefix of the total's, and a
    second array of them cost 8 bytes a prompt block for every live request (every agent holds
    its last call through its tool gap). ``total_keys`` is never modified after construction.
    """

    request_id: int
    session_id: int
    agent_class: str
    depth: int
    call_index: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    prompt_blocks: int          # full blocks of the prompt: total_keys[:prompt_blocks]
    total_keys: list[int]
    done: simpy.Event
    gap_before_s: float = float("nan")
    gap_kind: str = "first"
    mutations: int = 0          # history rewrites (compactions, edits) of the session before this call
    # The agent's history rewrites since its previous call, if any: (instance of that call,
    # first rewritten block, full blocks that call left cached); () when none.
    rewrite: tuple = ()
    # The agent's pause after this call, known when it is issued (pre-sampled in the same draw
    # order, so results do not change): "tool", "human", "join" (sub-agents) or "" (last call).
    # The engine turns tool/human pauses into the policy's on_tool_start (see engine/simulation.py).
    agent_id: int = -1          # one agent (a session's main conversation or one sub-agent)
    next_gap_s: float = float("nan")
    next_gap_kind: str = ""
    # Filled by the serving instance.
    instance: int = -1
    admitted_s: float = float("nan")
    first_token_s: float = float("nan")
    finish_s: float = float("nan")
    hit_tokens: int = 0
    prefilled_tokens: int = 0   # prompt tokens computed by prefill (hit + prefilled = prompt when done)
    rejected: bool = False
    # Why it was rejected (agentsim.cluster.serving.admission.REJECT_REASONS; "" when served).
    reject_reason: str = ""
    # Memory hierarchy: hit tokens by the tier that served them, bytes loaded, load end.
    tier_hit_tokens: dict = field(default_factory=dict)
    loaded_bytes: float = 0.0
    load_done_s: float = float("nan")
    # Engine-style KV admission (agentsim.cluster.serving.kv_admission): preemptions of this
    # call, the tokens they made it compute again, and where a preempted call resumes.
    preemptions: int = 0
    swap_preemptions: int = 0
    preempted_recompute_tokens: int = 0
    resume_tokens: int = 0          # tokens it needs before its next output token, when last preempted
    resume_computed_tokens: int = 0  # of those, the tokens whose KV it had computed then
    resume_output_left: int = -1    # output tokens still to produce then; -1: never preempted
    # Time in the waiting queue before the first admission by cause (seconds; they sum to
    # queue_wait_s): no batch slot, no KV memory, held by its own prefetch or return prefetch,
    # the iteration in progress; then, once admitted, waiting for its first prefill chunk.
    # Waiting again after a preemption is requeue_wait_s (agentsim.cluster.serving.queue_causes).
    queue_slot_s: float = 0.0
    queue_kv_s: float = 0.0
    queue_load_s: float = 0.0
    queue_step_s: float = 0.0
    queue_chunk_s: float = float("nan")
    requeue_wait_s: float = 0.0
    queue_mark: tuple = ()          # the instance's cumulative cause clocks when it (re)entered the queue
    # Disaggregated serving (agentsim.cluster.serving.disaggregation): the prefill worker that
    # computed the prompt (-1: aggregated serving), its first token, the decode worker's own
    # cached prefix, and the KV hand-off (bytes, time on the links, wait for a decode slot).
    prefill_worker: int = -1
    remote_prefill: bool = False    # a prefill worker computes its prompt (its decode worker receives the KV)
    prefill_done_s: float = float("nan")
    prefill_hit_tokens: int = 0
    prefill_computed_tokens: int = 0
    prefill_tier_hit_tokens: dict = field(default_factory=dict)   # the prefill worker's hits by tier
    decode_hit_tokens: int = 0
    kv_transfer_bytes: float = 0.0
    kv_transfer_s: float = float("nan")
    decode_queue_s: float = float("nan")
    decode_first_step_s: float = float("nan")   # KV ready -> end of the decode worker's first step (first token)
    # Prefill-ahead (agentsim.engine.prefill_ahead): a background prefill of a tool gap's context,
    # admitted behind live requests and never recorded as a call; with ``keep_pin`` its committed
    # path stays pinned (``held_node``) for the mechanism to release.
    background: bool = False
    keep_pin: bool = False
    held_node: object = None
    prefill_gap: object = None

    @property
    def prompt_keys(self) -> list[int]:
        """The prompt's full-block keys, ``total_keys[:prompt_blocks]`` (a new slice when the
        output added full blocks: hold it only as long as the caller needs it)."""
        keys = self.total_keys
        if self.prompt_blocks == len(keys):
            return keys
        return keys[:self.prompt_blocks]
