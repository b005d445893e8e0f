"""The lazily advanced decoding set gives exactly the totals of per-request counters."""

from __future__ import annotations

import random
from types import SimpleNamespace

from agentsim.cluster.serving.batch import DecodingSet as _DecodingSet, Running as _Running


def new_state(seq: int, context: int, output_left: int) -> _Running:
    state = _Running(SimpleNamespace(prompt_tokens=context + 1, output_tokens=output_left), None, 0, 0, context)
    state.prefill_left = 0
    state.seq = seq
    return state


def test_lazy_decoding_set_matches_eager_counters():
    rng = random.Random(5)
    lazy = _DecodingSet()
    eager: dict[int, list[int]] = {}  # seq -> [context, output_left]
    seq = 0
    for _ in range(3000):
        if rng.random() < 0.4 or not eager:
            context, left = rng.randint(1, 50_000), rng.randint(0, 300)
            lazy.add(new_state(seq, context, left))
            eager[seq] = [context, left]
            seq += 1
        if not eager:
            continue
        assert lazy.count == len(eager)
        assert lazy.context_tokens() == sum(c for c, _ in eager.values())
        assert lazy.min_output_left() == min(left for _, left in eager.values())
        steps = rng.choice([1, 1, rng.randint(0, lazy.min_output_left() + 2)])
        lazy.clock += steps
        for counters in eager.values():
            counters[0] += steps
            counters[1] -= steps
        finished = lazy.pop_finished()
        expected = sorted(s for s, (_, left) in eager.items() if left <= 0)
        assert [state.seq for state in finished] == expected  # admission order
        for state in finished:
            context, left = eager.pop(state.seq)
            assert (state.context_tokens, state.output_left) == (context, left)


def test_requests_ready_mid_iteration_join_after_its_step():
    lazy = _DecodingSet()
    lazy.add(new_state(0, 100, 10))
    late = new_state(1, 200, 5)
    lazy.pending.append(late)  # its load arrived while the step was running
    lazy.clock += 1
    lazy.flush()
    assert lazy.context_tokens() == 101 + 200
    assert lazy.min_output_left() == 5
