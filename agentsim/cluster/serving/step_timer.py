"""The contract between a serving instance and its step timing (the roofline model or the
measured tables): what the batch loop asks, in seconds per iteration or stretch."""

from __future__ import annotations

from typing import Protocol, Sequence


class StepTimer(Protocol):
    """What the instance asks of its step timing (the roofline model or measured tables)."""

    kv_bytes_per_token: float

    def iteration_s(self, chunks: Sequence[tuple[int, int]], n_decode: int, decode_context_tokens: float) -> float:
        """One iteration: ``chunks`` = (new tokens, context tokens before the chunk) per
        prefilling sequence, plus ``n_decode`` decoding sequences with that summed context."""

    def decode_stretch_s(self, n_decode: int, context_tokens: float, steps: int) -> float:
        """``steps`` decode-only steps; the context grows by ``n_decode`` tokens a step."""

    def decode_steps_within(self, n_decode: int, context_tokens: float, elapsed_s: float) -> int:
        """Whole decode steps completed within ``elapsed_s`` (inverse of the above)."""

    def prefill_s(self, new_tokens: float, context_tokens: float) -> float:
        """Prefill alone (for the load-versus-recompute rule)."""
