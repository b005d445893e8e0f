"""Count-min frequency sketch with periodic halving (TinyLFU; policies spec section 3.10).

4 rows of small saturating counters (cap 15, the 4-bit counters of the paper) indexed by a
seeded multiplicative hash of the block key; after ``sample_size`` increments every counter
is halved ("reset"), so the sketch tracks recent frequency. ``sample_size`` counts block
accesses: a policy that keys a whole run of blocks by one key (all of them are accessed
together) passes the run's block count as ``accesses``, so the sketch resets after as many
block accesses as a per-block sketch would (counting one per run, a prefix-mode stream of long
runs never reached the sample size and the counts saturated). Deterministic: no Python ``hash``
randomisation is involved (keys are integers, the row seeds are fixed odd constants).

Memory: each row is a ``bytearray`` (one byte per counter, not a Python list's eight-byte
slot), and a row has at most :data:`MAX_WIDTH` counters whatever the capacity asked for. A
capacity of 2^32 blocks (``limits.max_blocks_per_tier``) sized the rows as 4 x 2^32 list slots,
137 GB allocated before the first event; a row of 2^24 counters already keeps collisions rare
among the 2^24 most frequent keys, more blocks than any cache of a real machine holds
(16.7M blocks of 64 tokens). Below that capacity the sketch is the same as before.
"""

from __future__ import annotations

_SEEDS = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93)
_S0, _S1, _S2, _S3 = _SEEDS
#: Counters per row at most (see the module docstring).
MAX_WIDTH = 1 << 24
#: ``bytes.translate`` table halving every counter at a reset (in C, not a Python loop).
_HALVE = bytes(value >> 1 for value in range(256))


class FrequencySketch:
    def __init__(self, width: int, sample_size: int, counter_max: int = 15):
        """``width``: counters per row wanted (rounded up to a power of two, at least 16, at
        most :data:`MAX_WIDTH`); ``counter_max`` at most 255 (a counter is one byte)."""
        if not 0 < counter_max <= 255:
            raise ValueError(f"counter_max must be in [1, 255], got {counter_max}")
        self.width = min(MAX_WIDTH, 1 << max(4, (max(1, width) - 1).bit_length()))
        self.shift = 64 - (self.width.bit_length() - 1)
        self.index_mask = self.width - 1
        self.rows = [bytearray(self.width) for _ in _SEEDS]
        self.sample_size = max(1, sample_size)
        self.counter_max = counter_max
        self.additions = 0
        self.resets = 0

    # Row r indexes a key by ((key * _SEEDS[r]) mod 2**64) >> shift: the top bits of the low
    # 64 bits of the product. Spelled ``(key * seed) >> shift & index_mask``, which gives the
    # same bits for any int key, negative ones included (Python's >> and & act on the two's
    # complement), with one big-int operation less per row. estimate and increment spell
    # this out for the four rows: they run for every hit and insert, and the generic loops
    # took a quarter of a W-TinyLFU replay.
    def estimate(self, key: int) -> int:
        shift = self.shift
        mask = self.index_mask
        r0, r1, r2, r3 = self.rows
        return min(r0[key * _S0 >> shift & mask], r1[key * _S1 >> shift & mask],
                   r2[key * _S2 >> shift & mask], r3[key * _S3 >> shift & mask])

    def increment(self, key: int, amount: int = 1, accesses: int = 1) -> None:
        """Add ``amount`` to ``key``'s counters (saturating); ``accesses`` block accesses count
        towards the reset (0 for a count copied to a new key, which is no access)."""
        shift = self.shift
        mask = self.index_mask
        cap = self.counter_max
        r0, r1, r2, r3 = self.rows
        i = key * _S0 >> shift & mask
        value = r0[i] + amount
        r0[i] = cap if value > cap else value
        i = key * _S1 >> shift & mask
        value = r1[i] + amount
        r1[i] = cap if value > cap else value
        i = key * _S2 >> shift & mask
        value = r2[i] + amount
        r2[i] = cap if value > cap else value
        i = key * _S3 >> shift & mask
        value = r3[i] + amount
        r3[i] = cap if value > cap else value
        self.additions += accesses
        if self.additions >= self.sample_size:
            self.additions //= 2
            self.resets += 1
            for row in self.rows:
                row[:] = row.translate(_HALVE)

    def state_bytes(self) -> int:
        return len(self.rows) * self.width // 2  # 4-bit counters
