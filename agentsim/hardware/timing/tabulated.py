"""Step timing from tabulated measured-kernel databases (see :mod:`.tables`).

The timer implements the serving instance's step-timer contract:

* ``iteration_s(chunks, n_decode, decode_context_tokens)``: one mixed iteration. ``chunks`` is
  ``(new_tokens, context_tokens_before_chunk)`` per prefilling sequence. Time = context-free
  operations over all the step's tokens + each chunk's attention + the decoding sequences'
  attention at their mean context (aiconfigurator's own three-pass composition). A step with no
  chunks is a decode step, timed from the whole-step decode table.
* ``decode_stretch_s`` / ``decode_steps_within``: decode-only stretches in closed form; the step
  time is linearised in the context over the stretch (secant over ``max(1024, C)`` tokens of
  mean context ``C``), exact for attention, whose cost is linear in the context.
* ``prefill_s(new_tokens, context_tokens)``: the prefill alone, chunked as the instance would.

With attention data parallelism (``attention_dp`` > 1) each rank serves its own sequences: the
decoding ones are divided evenly, but a prefilling sequence is on one rank, so a step with
chunks takes its busiest rank's time (one 8K prompt on a DP-4 prefill worker is timed as 8K
tokens on one rank, not 2K on each).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from agentsim.hardware.timing import linear_decode
from agentsim.hardware.timing.tables import StepTables


@dataclass
class TabulatedTimer(linear_decode.LinearDecodeStretches):
    """A deployment's step timer from its :class:`StepTables`.

    ``overhead_s``: fixed host-side cost added to every iteration (scheduling, sampling,
    kernel launches) that per-kernel databases do not see; ``prefill_overhead_s``: host time
    added to an iteration with a prefill chunk (:mod:`.prefill_host`); ``chunk_tokens``: the
    per-step token budget ``prefill_s`` chunks by.
    """

    tables: StepTables
    kv_bytes_per_token: float
    chunk_tokens: int
    attention_dp: int = 1
    overhead_s: float = 0.0
    prefill_overhead_s: float = 0.0
    source: str = "measured"

    def __post_init__(self) -> None:
        self._non_attention, self._chunk, self._decode_attention, self._decode = self.tables.tables()
        self._last = linear_decode.LastCoefficients()

    def iteration_s(self, chunks: Sequence[tuple[int, int]], n_decode: int, decode_context_tokens: float) -> float:
        dp = self.attention_dp
        if not chunks:
            if n_decode <= 0:
                return self.overhead_s
            per_rank = -(-n_decode // dp)
            return self._decode(per_rank, decode_context_tokens / n_decode) + self.overhead_s
        chunk = self._chunk
        if dp == 1:
            tokens = n_decode
            attention = 0.0
            for new, context in chunks:
                tokens += new
                attention += chunk(new, context)
            total = self._non_attention(tokens) + attention
        else:
            total = self._busiest_rank_s(chunks, n_decode / dp)
        if n_decode > 0:
            total += self._decode_attention(-(-n_decode // dp), decode_context_tokens / n_decode)
        return total + self.overhead_s + self.prefill_overhead_s

    def _busiest_rank_s(self, chunks: Sequence[tuple[int, int]], decode_tokens_per_rank: float) -> float:
        """The prefill part of a step with attention DP: the slowest rank's. A prefilling
        sequence lives on one rank (its attention and its tokens' projections run there), so
        the chunks are placed longest first on the least-loaded rank; the decoding sequences
        are spread evenly. The rank's context-free time is the table's at its tokens (the
        expert GEMMs and their all-to-all wait for the busiest rank)."""
        dp = self.attention_dp
        chunk = self._chunk
        if len(chunks) <= dp:   # a rank each
            return max(self._non_attention(decode_tokens_per_rank + new) + chunk(new, context)
                       for new, context in chunks)
        rank_tokens = [decode_tokens_per_rank] * dp
        rank_attention = [0.0] * dp
        for new, context in sorted(chunks, key=lambda c: -c[0]):
            rank = min(range(dp), key=rank_tokens.__getitem__)
            rank_tokens[rank] += new
            rank_attention[rank] += chunk(new, context)
        return max(self._non_attention(t) + a for t, a in zip(rank_tokens, rank_attention))

    def prefill_s(self, new_tokens: int, context_tokens: int) -> float:
        total = 0.0
        done = 0
        budget = self.chunk_tokens
        while done < new_tokens:
            n = min(budget, new_tokens - done)
            total += self.iteration_s(((n, context_tokens + done),), 0, 0.0)
            done += n
        return total

    def _decode_linear(self, n_decode: int, context_tokens: float) -> tuple[float, float]:
        per_rank = -(-n_decode // self.attention_dp)
        mean = context_tokens / n_decode if n_decode else 0.0
        horizon = mean if mean > 1024.0 else 1024.0
        first = self._decode(per_rank, mean)
        growth = (self._decode(per_rank, mean + horizon) - first) / horizon  # per step: mean context + 1
        return first + self.overhead_s, growth if growth > 0 else 0.0
