"""Re-blocking: merge ``factor`` consecutive blocks into one coarser block.

Used to compare traces recorded at different block sizes (Bailian 16, WEKA 64, Mooncake 512
tokens). Coarse block ``j`` covers source blocks ``[j*factor, (j+1)*factor)``; a shorter last
group (the prompt's tail) is kept as a partial block, as the source formats do.

Coarse keys: every supported format carries *prefix* keys (an id determines the whole prefix up
to its block), so the key of a group's last source block already names the coarse prefix and is
used as the coarse key (fast path, numpy slicing, no table). With ``exact=True`` keys are
instead chained and interned, ``key_j = intern(key_{j-1}, source keys of group j)``, which is
right for any id convention (dense ints from 1, first-appearance order) at the cost of a
table lookup per coarse block.
"""

from __future__ import annotations

from array import array
from dataclasses import replace

from agentsim.errors import InputError
from agentsim.workload.traces.records import TraceRequest


class Reblocker:
    """Maps requests of ``source_block_tokens`` blocks to ``target_block_tokens`` blocks.

    One instance must see every request of a replay (it owns the key interning table, whose
    size is the number of distinct coarse prefixes).
    """

    def __init__(self, source_block_tokens: int, target_block_tokens: int, source: str = "--block-size",
                 *, exact: bool = False):
        if target_block_tokens <= 0 or target_block_tokens % source_block_tokens:
            raise InputError(
                f"block size {target_block_tokens} is not a positive multiple of the trace's "
                f"{source_block_tokens}-token blocks", source)
        self.source_block_tokens = source_block_tokens
        self.target_block_tokens = target_block_tokens
        self.factor = target_block_tokens // source_block_tokens
        self.exact = exact
        self._ids: dict[tuple, int] = {}

    def keys(self, block_keys: array) -> array:
        """Coarse keys for one request's source keys."""
        factor = self.factor
        if factor == 1:
            return block_keys
        if not self.exact:
            n = len(block_keys)
            if n == 0:
                return array("q")
            import numpy as np  # here, not at import: most traces are never reblocked

            view = np.frombuffer(block_keys, dtype=np.int64)
            last = view[factor - 1::factor]
            if n % factor:
                last = np.append(last, view[-1])
            return array("q", last.tobytes())
        ids = self._ids
        out = array("q")
        prev = 0
        for start in range(0, len(block_keys), factor):
            group = (prev, *block_keys[start:start + factor])
            key = ids.get(group)
            if key is None:
                key = len(ids) + 1
                ids[group] = key
            out.append(key)
            prev = key
        return out

    def apply(self, request: TraceRequest) -> TraceRequest:
        if request.block_tokens != self.source_block_tokens:
            raise InputError(
                f"request has {request.block_tokens}-token blocks, expected {self.source_block_tokens}",
                request.source, f"line {request.line}")
        if self.factor == 1:
            return request
        return replace(request, block_keys=self.keys(request.block_keys), block_tokens=self.target_block_tokens)
