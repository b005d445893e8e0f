"""agentsim's timed open-loop replay against NVIDIA Dynamo's offline replay, as whole processes.

Both replay the Mooncake conversation trace (plain JSONL, 512-token blocks) on one worker at the
same KV size: 2048 blocks of 512 tokens (Dynamo: ``num_gpu_blocks`` 16384 of 64) and 512 x 512
(4096 x 64). Wall time is that of the whole process (interpreter start, imports, trace reading,
simulation, report), the best of ``--repeat`` runs of each, run one after the other. The target
is agentsim <= 0.5x Dynamo's wall time. Hit ratios and TTFT percentiles of both are printed as
informational rows; ``docs/performance.md`` explains why they differ.

Dynamo (``ai-dynamo==1.4.2``) is a benchmark peer, never a dependency: it lives in its own
virtual environment at ``.peers/dynamo`` (``python3 -m venv .peers/dynamo &&
.peers/dynamo/bin/pip install ai-dynamo==1.4.2``). Without it this benchmark prints one row
saying so.

    .venv/bin/python bench/vs_dynamo.py [--repeat 1] [--sizes 2048,512]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

from _common import AGENTSIM_PYTHON, DYNAMO_PYTHON, ROOT, Row, plain_mooncake, print_table

DYNAMO_BLOCK_TOKENS = 64
TRACE_BLOCK_TOKENS = 512


def run_agentsim(trace: Path, capacity_blocks: int) -> tuple[float, dict]:
    command = [str(AGENTSIM_PYTHON), "-m", "agentsim.cli", "replay", str(trace), "--format", "mooncake",
               "--mode", "open-loop", "--capacity-blocks", str(capacity_blocks), "--json"]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"agentsim replay failed: {done.stderr[-2000:]}")
    return wall, json.loads(done.stdout.strip().splitlines()[-1])


def run_dynamo(trace: Path, capacity_blocks: int, report: Path) -> tuple[float, dict]:
    gpu_blocks = capacity_blocks * TRACE_BLOCK_TOKENS // DYNAMO_BLOCK_TOKENS
    command = [str(DYNAMO_PYTHON), "-m", "dynamo.replay", str(trace), "--trace-format", "mooncake",
               "--trace-block-size", str(TRACE_BLOCK_TOKENS), "--num-workers", "1",
               "--extra-engine-args", json.dumps({"engine_type": "vllm", "num_gpu_blocks": gpu_blocks}),
               "--report-json", str(report)]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"dynamo.replay failed: {done.stderr[-2000:]}")
    return wall, json.loads(report.read_text())


def rows(repeat: int = 1, sizes: tuple[int, ...] = (2048, 512)) -> list[Row]:
    if not DYNAMO_PYTHON.exists():
        return [Row("open-loop wall vs Dynamo replay", "-", "absent", None, None,
                    f"skipped: no Dynamo peer at {DYNAMO_PYTHON.parent.parent} (see bench/vs_dynamo.py)")]
    out: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        trace = plain_mooncake(Path(tmp))
        for capacity in sizes:
            ours_s, theirs_s = float("inf"), float("inf")
            ours = theirs = None
            for _ in range(max(1, repeat)):
                wall, ours = run_agentsim(trace, capacity)
                ours_s = min(ours_s, wall)
                wall, theirs = run_dynamo(trace, capacity, Path(tmp) / f"dynamo-{capacity}.json")
                theirs_s = min(theirs_s, wall)
            size = f"{capacity}x512"
            out.append(Row(f"open-loop wall vs Dynamo replay, KV {size}", f"{ours_s:.2f} s", f"{theirs_s:.2f} s",
                           ours_s / theirs_s, ("<=", 0.5)))
            out.append(Row(f"  hit ratio vs Dynamo prefix reuse, KV {size}", f"{ours['block_hit_ratio']:.3f}",
                           f"{theirs['prefix_cache_reused_ratio']:.3f}", None, None))
            for q in ("p50", "p99"):
                key = "median_ttft_ms" if q == "p50" else f"{q}_ttft_ms"
                mine = ours[f"ttft_{q}_s"]
                their = theirs[key] / 1000.0
                out.append(Row(f"  TTFT {q} vs Dynamo, KV {size}", f"{mine:.3g} s", f"{their:.3g} s",
                               mine / their if their else None, None))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--sizes", default="2048,512", help="KV sizes in 512-token blocks")
    args = parser.parse_args()
    print_table(rows(args.repeat, tuple(int(s) for s in args.sizes.split(","))))


if __name__ == "__main__":
    main()
