"""The ghost FIFO (ARC's B1/B2, 2Q's A1out, S3-FIFO's G) against a reference model.

The reference is the textbook structure: an insertion-ordered mapping where adding a present
key keeps its place, trimming drops the oldest keys and a ghost hit removes a key wherever it
is. The interesting cases are keys removed by a ghost hit, added again and trimmed past.
"""

from __future__ import annotations

from collections import OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st

from agentsim.cache.policies._queues import Ghost


class ReferenceGhost:
    def __init__(self, capacity_blocks: int):
        self.capacity = capacity_blocks
        self.keys: OrderedDict[int, None] = OrderedDict()

    def add(self, keys):
        if self.capacity == 0:
            return
        for key in keys:
            self.keys.setdefault(key, None)
        self.trim(self.capacity)

    def trim(self, limit):
        while len(self.keys) > max(0, limit):
            self.keys.popitem(last=False)

    def remove(self, key):
        return self.keys.pop(key, 0) is None


operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.lists(st.integers(0, 30), max_size=8)),
        st.tuples(st.just("remove"), st.integers(0, 30)),
        st.tuples(st.just("discard"), st.lists(st.integers(0, 30), max_size=5)),
        st.tuples(st.just("trim"), st.integers(-2, 20)),
        st.tuples(st.just("drop_oldest"), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(capacity=st.integers(0, 12), ops=operations)
def test_ghost_matches_the_ordered_reference(capacity, ops):
    ghost, ref = Ghost(capacity), ReferenceGhost(capacity)
    for op, arg in ops:
        if op == "add":
            ghost.add(arg)
            ref.add(arg)
        elif op == "remove":
            assert ghost.remove(arg) == ref.remove(arg)
        elif op == "discard":
            ghost.discard(arg)
            for key in arg:
                ref.remove(key)
        elif op == "trim":
            ghost.trim(arg)
            ref.trim(arg)
        else:
            ghost.trim(len(ghost) - 1)
            ref.trim(len(ref.keys) - 1)
        assert list(ghost._member) == list(ref.keys)
        assert len(ghost) == len(ref.keys)
        probe = list(range(31))
        assert ghost.members_of(probe) == set(ref.keys)
        assert all((key in ghost) == (key in ref.keys) for key in probe)


def test_a_removed_key_added_again_is_trimmed_at_its_new_place():
    ghost = Ghost(3)
    ghost.add([1, 2, 3])
    assert ghost.remove(1)
    ghost.add([4, 1])             # 1 comes back as the newest key
    assert list(ghost._member) == [3, 4, 1]  # over capacity: the oldest key, 2, went
    ghost.add([3, 5])             # 3 is present and keeps its place; 5 pushes it out
    assert list(ghost._member) == [4, 1, 5]
    ghost.trim(1)
    assert list(ghost._member) == [5] and 5 in ghost and 4 not in ghost
