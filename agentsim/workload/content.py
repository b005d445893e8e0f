"""Token streams and their block keys.

A session's context is a stream of tokens; block ``j`` covers tokens ``[j*B, (j+1)*B)``. Only
full blocks get a key (only full blocks are cacheable). Keys are integers from one allocator per
simulation, so equal keys mean equal prefixes: the global system prompt's blocks are shared by
every session, a class's tools prefix by every session of that class, a parent's history by its
sub-agents. A block that straddles a shared prefix and private text is private.

A stream holds its keys in an ``array`` of :data:`KEY_TYPECODE` (unsigned 32-bit): 4 bytes a
key, against a list's 8-byte pointer plus a 32-byte int object per key. Every key list the cache
stores for the long term (radix runs, merged runs, requests' prompt slices) is a slice of a
stream's keys, so it is such an array too; slices of arrays of one type compare with ``memcmp``
(faster than lists' element-wise compare). Trace replays keep their own 64-bit keys
(:mod:`agentsim.workload.traces`); the two never meet in one run.

Why 32 bits: the cache's content is mostly keys (a resident block is a key in its node's run; a
live session's context is its stream), and on the GB300 rack the keys were about 60% of what
the event loop's memory grew by per request. The allocator hands out about 40 keys a request
(one per 64 new tokens), so 2**32 - 1 keys last about 100 million requests: some fifteen fleet
days in one run. A run that would go past them stops there (:class:`KeySpaceExhausted`) and
keeps the requests finished so far, as a run stopped by Ctrl-C does.
"""

from __future__ import annotations

from array import array

#: ``array`` type code of the agents' block keys: unsigned 32-bit.
KEY_TYPECODE = "I"
#: One past the largest key the allocator hands out (the largest :data:`KEY_TYPECODE` value + 1).
KEY_LIMIT = 1 << 32


class KeySpaceExhausted(RuntimeError):
    """The allocator has no fresh keys left (:data:`KEY_LIMIT`). The simulation ends the run
    there, as a stop request would (its summary says ``complete: false`` and why)."""

    def __init__(self, keys: int) -> None:
        #: How many keys the allocator could hand out in all.
        self.keys = keys
        super().__init__(keys)

    def __str__(self) -> str:
        return (f"the run needs more than the {self.keys:,} block keys agentsim can hand out "
                f"(keys are {8 * array(KEY_TYPECODE).itemsize}-bit; about 40 a request): "
                "stopped; shorten duration_s or run fewer agents")


class KeyAllocator:
    """Hands out fresh block keys (ints ``1 .. limit - 1``) in a deterministic order; asked for
    more, it raises :class:`KeySpaceExhausted` and hands out none."""

    def __init__(self, limit: int | None = None) -> None:
        self._next = 1
        self._limit = KEY_LIMIT if limit is None else limit

    def peek(self) -> int:
        """The next key :meth:`take` would hand out (every key so far is smaller)."""
        return self._next

    def _claim(self, count: int) -> range:
        """The next ``count`` keys, claimed; past the limit none are and this raises."""
        start = self._next
        end = start + count
        if end > self._limit:
            raise KeySpaceExhausted(self._limit - 1)
        self._next = end
        return range(start, end)

    def take(self, count: int) -> list[int]:
        return list(self._claim(count))

    def extend(self, keys: array, count: int) -> None:
        """Append ``count`` fresh keys to ``keys`` (``keys.extend(take(count))`` without the
        temporary list: every call of every session extends its context this way)."""
        keys.extend(self._claim(count))


class TokenStream:
    """A context of ``tokens`` tokens and the keys of its full blocks.

    ``keys`` (an ``array`` of :data:`KEY_TYPECODE`) may be shared (copied) from another stream: extending or
    rewriting this stream never changes the other one.

    Copy on write: :meth:`full_block_keys` of the whole stream returns ``keys`` itself (an
    agent's call takes its whole context), and the next append builds a new array instead of
    extending that one. So a call and its agent's stream hold one array of keys between the
    call and the agent's next append, not two; an array handed out is never modified.
    """

    __slots__ = ("block_tokens", "tokens", "keys", "shared_blocks", "_alloc", "_handed_out")

    def __init__(self, block_tokens: int, alloc: KeyAllocator, prefix_keys: list[int], prefix_tokens: int,
                 shared_blocks: int | None = None):
        self.block_tokens = block_tokens
        self._alloc = alloc
        self.tokens = prefix_tokens
        self.keys = array(KEY_TYPECODE, prefix_keys[: prefix_tokens // block_tokens])
        self.shared_blocks = len(self.keys) if shared_blocks is None else shared_blocks
        #: Whether ``keys`` was handed out by :meth:`full_block_keys` (then never extended).
        self._handed_out = False
        self._fill()

    def _fill(self) -> None:
        missing = self.tokens // self.block_tokens - len(self.keys)
        if missing > 0:
            if self._handed_out:
                fresh = array(KEY_TYPECODE)
                self._alloc.extend(fresh, missing)
                self.keys = self.keys + fresh
                self._handed_out = False
            else:
                self._alloc.extend(self.keys, missing)

    def append(self, tokens: int) -> None:
        """Append ``tokens`` new tokens (outputs, tool results, user text)."""
        tokens = int(tokens)
        if tokens > 0:  # max(0, tokens) added, without the builtin's cost
            self.tokens += tokens
        self._fill()

    def rewrite_after(self, keep_tokens: int) -> int:
        """Context mutation: keep the shared prefix plus ``keep_tokens`` freshly written tokens.

        Returns the number of blocks whose keys were invalidated.
        """
        shared_tokens = self.shared_blocks * self.block_tokens
        old_blocks = len(self.keys)
        self.keys = self.keys[: self.shared_blocks]
        self._handed_out = False
        self.tokens = shared_tokens + max(0, int(keep_tokens))
        self._fill()
        return old_blocks - self.shared_blocks

    def rewrite_from(self, offset_tokens: int, removed_tokens: int) -> int:
        """Edit: tokens before ``offset_tokens`` stay; ``removed_tokens`` after it are dropped and
        the rest is rewritten (new keys). Returns the number of block keys invalidated."""
        offset_tokens = max(self.shared_blocks * self.block_tokens, min(int(offset_tokens), self.tokens))
        keep_blocks = offset_tokens // self.block_tokens
        old_blocks = len(self.keys)
        self.keys = self.keys[:keep_blocks]
        self._handed_out = False
        self.tokens = max(offset_tokens, self.tokens - max(0, int(removed_tokens)))
        self._fill()
        return old_blocks - keep_blocks

    def fork(self) -> "TokenStream":
        """A copy that shares this stream's history as its prefix (for sub-agents)."""
        child = TokenStream(self.block_tokens, self._alloc, self.keys, self.tokens, shared_blocks=len(self.keys))
        return child

    def full_block_keys(self, tokens: int) -> array:
        """Keys of the full blocks within the first ``tokens`` tokens: an array the caller must
        not modify (``keys`` itself when they are all of them; see the class docstring)."""
        blocks = tokens // self.block_tokens
        keys = self.keys
        if blocks >= len(keys):
            self._handed_out = True
            return keys
        return keys[:blocks]


class SharedPrefixes:
    """Keys of the global system prompt and of each agent class's tools prefix."""

    def __init__(self, block_tokens: int, alloc: KeyAllocator, global_tokens: int):
        self.block_tokens = block_tokens
        self.alloc = alloc
        self.global_tokens = global_tokens
        self.global_keys = alloc.take(global_tokens // block_tokens)
        self._class_keys: dict[str, tuple[list[int], int]] = {}

    def all_keys(self) -> set[int]:
        """Every key of the global prompt and of the class prefixes made so far."""
        keys = set(self.global_keys)
        for class_keys, _tokens in self._class_keys.values():
            keys.update(class_keys)
        return keys

    def for_class(self, class_name: str, tools_tokens: int) -> tuple[list[int], int]:
        """(keys, tokens) of the prefix every session of ``class_name`` starts with."""
        if class_name not in self._class_keys:
            tokens = self.global_tokens + tools_tokens
            extra = tokens // self.block_tokens - len(self.global_keys)
            keys = self.global_keys[: tokens // self.block_tokens] + self.alloc.take(max(0, extra))
            self._class_keys[class_name] = (keys, tokens)
        return self._class_keys[class_name]
