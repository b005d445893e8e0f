"""Block keys are held compactly wherever they are stored for the long term: token streams, the
requests' key slices and the tiered cache's runs (merged runs included) are ``array('I')`` (4
bytes a key), not lists of int objects (about 40 bytes a key); a request holds one array of
keys (its prompt's are a prefix of its total's)."""

import gc
from array import array

from agentsim.cache.tiers import TieredCache
from agentsim.engine.loading import load_scenario
from agentsim.engine.simulation import Simulation
from agentsim.workload.content import KEY_TYPECODE, KeyAllocator, TokenStream
from tests.conftest import ROOT


def _is_compact(keys) -> bool:
    return type(keys) is array and keys.typecode == KEY_TYPECODE == "I"


def test_token_stream_keys_stay_arrays_through_every_edit():
    alloc = KeyAllocator()
    prefix = alloc.take(3)
    stream = TokenStream(64, alloc, prefix, 3 * 64 + 10)
    assert _is_compact(stream.keys) and list(stream.keys) == prefix
    stream.append(640)
    assert _is_compact(stream.keys) and len(stream.keys) == (3 * 64 + 650) // 64
    assert _is_compact(stream.full_block_keys(5 * 64)) and list(stream.full_block_keys(5 * 64)) == list(stream.keys[:5])
    child = stream.fork()
    child.append(64)
    assert _is_compact(child.keys) and child.keys[:len(stream.keys)] == stream.keys
    assert len(child.keys) == len(stream.keys) + 1          # the parent's stream is unchanged
    stream.rewrite_after(64)
    assert _is_compact(stream.keys) and stream.keys[:3] == array("q", prefix)
    stream.rewrite_from(4 * 64, 10)
    assert _is_compact(stream.keys)


def test_a_tiered_run_stores_every_run_and_request_slice_as_an_array():
    # A small HBM, so that runs are demoted, loaded back and merged.
    scenario = load_scenario(ROOT / "scenarios" / "gb300-nvl72-tiers.yaml",
                             ["duration_s=4m", "hardware.instances=2", "run.check_invariants=true",
                              "hardware.kv_capacity_bytes=4GB",
                              "workload.agent_classes.coding.arrival.concurrent=40"])
    sim = Simulation(scenario)
    submitted = []
    for instance in sim.instances:
        def submit(request, _submit=instance.submit):
            submitted.append(request)
            _submit(request)
        instance.submit = submit
    result = sim.run()
    assert result.summary["requests"] > 50 and len(submitted) >= result.summary["requests"]
    grew = 0
    for request in submitted:
        assert _is_compact(request.prompt_keys) and _is_compact(request.total_keys)
        held = [value for value in gc.get_referents(request) if isinstance(value, array)]
        assert held == [request.total_keys], "a request holds one copy of its keys"
        assert request.prompt_keys == request.total_keys[:len(request.prompt_keys)]
        assert len(request.prompt_keys) == request.prompt_tokens // scenario.cache.block_tokens
        grew += len(request.total_keys) > len(request.prompt_keys)
    assert grew > 0       # outputs that filled blocks: prompt and total keys differ
    nodes = 0
    for instance in sim.instances:
        cache = instance.cache
        assert isinstance(cache, TieredCache)
        for node in cache.iter_nodes():
            assert _is_compact(node.keys), f"run {node!r} holds {type(node.keys).__name__}"
            nodes += 1
    assert nodes > 10
    assert sum(instance.cache.merged_nodes for instance in sim.instances) > 0   # merged runs were checked too


def test_a_streams_whole_keys_are_handed_out_once_and_never_modified():
    """Copy on write: a call that takes the whole context gets the stream's own array (one array
    of keys between the call and the next append, not two), and appending or rewriting the
    stream afterwards leaves that array as it was."""
    alloc = KeyAllocator()
    stream = TokenStream(64, alloc, alloc.take(2), 2 * 64)
    stream.append(64 * 3 + 5)
    whole = stream.full_block_keys(stream.tokens)
    assert whole is stream.keys and _is_compact(whole)
    before = list(whole)
    stream.append(64 * 2)                       # new keys: a new array, the handed-out one unchanged
    assert stream.keys is not whole and list(whole) == before and len(stream.keys) == len(before) + 2
    assert list(stream.keys[:len(before)]) == before
    grown = stream.keys
    stream.append(64)                           # not handed out: extended in place
    assert stream.keys is grown
    part = stream.full_block_keys(64 * 3)
    assert part is not stream.keys and list(part) == list(stream.keys[:3])
    whole = stream.full_block_keys(stream.tokens)
    before = list(whole)
    stream.rewrite_after(64)
    stream.append(64 * 4)
    assert list(whole) == before and stream.keys is not whole
