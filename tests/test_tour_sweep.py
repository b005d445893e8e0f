"""The README tour's sweep (sweeps/policy-capacity.yaml) shows a difference its table explains:
policies differ where the cache evicts, and where they do not differ the regime row says the
cache never evicted."""

from __future__ import annotations

import pandas as pd
import yaml

from tests.conftest import ROOT, run_cli


def test_tour_sweep_differs_where_it_evicts_and_says_why_elsewhere(tmp_path):
    spec = yaml.safe_load((ROOT / "sweeps" / "policy-capacity.yaml").read_text())
    spec["base"] = str(ROOT / "scenarios" / "coding-agents.yaml")
    spec["set"] = {**spec.get("set", {}), "duration_s": "5m", "run.belady_headroom": False}
    spec["seeds"] = 1
    path = tmp_path / "tour.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    proc = run_cli("sweep", str(path), "--out", str(out), "--workers", "1", timeout=900)
    assert proc.returncode == 0, proc.stderr
    assert "│ regime" in proc.stdout                     # the table states each cell's regime
    assert "evicted_blocks" in proc.stdout
    table = pd.read_parquet(out / "results.parquet")
    policy, capacity = "cache.eviction.name", "hardware.kv_capacity_bytes"
    assert set(table[policy]) == {"lru", "kvflow", "belady_oracle"}
    by = table.set_index([policy, capacity])
    smallest, largest = "20GB", "80GB"
    # Where the cache evicts, the workflow-aware policies beat LRU ...
    small = by.xs(smallest, level=capacity)
    assert (small.regime == "capacity_bound").all()
    assert small.loc["belady_oracle", "hit_ratio"] > small.loc["lru", "hit_ratio"]
    assert small.loc["kvflow", "hit_ratio"] > small.loc["lru", "hit_ratio"]
    # ... and where every policy scores the same, nothing was evicted, as the regime row says.
    large = by.xs(largest, level=capacity)
    assert (large.regime == "no_eviction").all() and (large.evicted_blocks == 0).all()
    assert large.hit_ratio.nunique() == 1
