"""Timed summaries account for rejected requests: their prompts are misses in ``hit_ratio``,
and ``rejected_fraction`` stands beside the latency percentiles that leave them out."""

import numpy as np
import pytest

from agentsim.replay.timed import run_timed_replay
from tests.conftest import ROOT

MOONCAKE = ROOT / "tests" / "fixtures" / "traces" / "mooncake_head40.jsonl"


@pytest.fixture(scope="module")
def rejecting_run():
    # 20 blocks of 512 tokens: every prompt longer than 10K tokens cannot be admitted.
    return run_timed_replay(MOONCAKE, mode="open-loop", capacity_blocks=20)


def test_rejected_prompts_count_as_misses_in_the_hit_ratio(rejecting_run):
    summary, table = rejecting_run.summary, rejecting_run.tables["requests"]
    rejected = table[table.rejected.astype(bool)]
    served = table[~table.rejected.astype(bool)]
    assert 0 < len(rejected) < len(table) and summary["requests_rejected"] == len(rejected)
    assert summary["rejected_prompt_tokens"] == int(rejected.prompt_tokens.sum()) > 0
    assert summary["hit_ratio"] == pytest.approx(served.hit_tokens.sum() / table.prompt_tokens.sum())
    assert summary["hit_ratio"] < served.hit_tokens.sum() / served.prompt_tokens.sum()


def test_latency_percentiles_are_over_served_requests_with_the_rejected_fraction_beside(rejecting_run):
    summary, table = rejecting_run.summary, rejecting_run.tables["requests"]
    served = table[~table.rejected.astype(bool)]
    assert summary["ttft_p99_s"] == pytest.approx(np.percentile(served.ttft_s.dropna(), 99))
    assert summary["rejected_fraction"] == pytest.approx(table.rejected.mean())
    assert summary["sla_attainment"] <= 1 - summary["rejected_fraction"] + 1e-12


def test_a_selection_that_keeps_every_row_is_the_table_itself():
    """No warm-up and no rejections: the summaries read the request table itself instead of a
    copy per selection (a long run's table is tens of MB), with the same figures."""
    import numpy as np
    import pandas as pd

    from agentsim.metrics.summary import rows_where

    frame = pd.DataFrame({"arrival_s": [0.0, 1.0, 2.0], "x": [1, 2, 3]})
    assert rows_where(frame, frame.arrival_s >= 0.0) is frame
    part = rows_where(frame, frame.arrival_s >= 1.0)
    assert part is not frame and part.x.tolist() == [2, 3]
    assert rows_where(frame, np.zeros(3, dtype=bool)).empty
