"""The agents' block keys are 32-bit (``agentsim.workload.content.KEY_TYPECODE``): the allocator
refuses to go past its limit, and a run that needs more keys stops there, keeping the requests
finished so far (summary ``complete: false``, ``agentsim run`` exit code 2 with one message)."""

from __future__ import annotations

import json
from array import array

import pytest

from agentsim import cli
from agentsim.engine.loading import load_scenario
from agentsim.engine.simulation import Simulation
from agentsim.workload import content
from agentsim.workload.content import KeyAllocator, KeySpaceExhausted, TokenStream
from tests.conftest import SMALL_SCENARIO


def test_the_allocator_hands_out_keys_up_to_its_limit_and_no_further():
    alloc = KeyAllocator(limit=10)
    assert alloc.take(4) == [1, 2, 3, 4]
    keys = array("I")
    alloc.extend(keys, 5)
    assert list(keys) == [5, 6, 7, 8, 9] and alloc.peek() == 10
    with pytest.raises(KeySpaceExhausted, match="more than the 9 block keys"):
        alloc.extend(keys, 1)
    with pytest.raises(KeySpaceExhausted):
        alloc.take(1)
    assert list(keys) == [5, 6, 7, 8, 9] and alloc.peek() == 10      # nothing handed out
    assert alloc.take(0) == []


def test_the_default_limit_is_the_key_type_s():
    alloc = KeyAllocator()
    alloc._next = 2**32 - 3
    stream = TokenStream(64, alloc, [], 0)
    stream.append(3 * 64)                                             # the last three keys fit
    assert list(stream.keys) == [2**32 - 3, 2**32 - 2, 2**32 - 1]
    with pytest.raises(KeySpaceExhausted):
        stream.append(64)
    assert len(stream.keys) == 3 and stream.tokens == 4 * 64


def _scenario(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(SMALL_SCENARIO)
    return path


def test_a_run_out_of_keys_stops_with_the_requests_finished_so_far(tmp_path, monkeypatch):
    scenario = load_scenario(_scenario(tmp_path))
    whole = Simulation(scenario).run().summary
    assert whole["complete"] is True
    # A limit a third of the way through the run's keys.
    used = Simulation(scenario)
    used.run()
    monkeypatch.setattr(content, "KEY_LIMIT", used.driver.alloc.peek() // 3)
    result = Simulation(scenario).run()
    summary = result.summary
    assert summary["complete"] is False
    assert "block keys" in summary["incomplete_reason"]
    assert 0 < summary["requests"] < whole["requests"]
    assert summary["simulated_s"] < scenario.duration_s
    assert len(result.tables["requests"]) == summary["requests"]


def test_agentsim_run_writes_the_partial_run_and_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(content, "KEY_LIMIT", 2_000)
    path = _scenario(tmp_path)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as done:
        cli.main(["run", str(path), "--out", str(out), "--quiet"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if not line.startswith("warning: ")]
    assert len(errors) == 1 and "Traceback" not in err
    assert errors[0].startswith(f"error: {path}: the run needs more than the 1,999 block keys")
    assert "finished requests written to" in errors[0]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False and "block keys" in summary["incomplete_reason"]
    assert (out / "requests.parquet").exists()
