"""The seed study on the Claude Code sessions: cache-only replays behind notebook 04 and
docs/seed-study.md.

Every number comes from :func:`agentsim.replay.cache_only.replay_cache_only` over sessions read
by :func:`agentsim.replay.load.load_trace`, under the data README's arrival model: session ``k``
(file-name order, 0-based) starts at ``k x session_offset_s`` and keeps its recorded
timestamps. Hit ratio = hit blocks / requested blocks (longest resident prefix), as everywhere
in agentsim. :func:`run_study` computes four tables (:class:`StudyTables`):

* ``grid``: every policy x capacity x session offset, each row with its cell's **upper
  bound** (``upper_bound_hit_ratio``: :func:`agentsim.cache.hit_bound.prefix_hit_upper_bound`,
  proven to bound every policy, online or offline, under the same replay semantics);
* ``lru_offsets``: LRU at each capacity over a denser range of offsets (the arrival model's
  effect on the published comparison);
* ``subsets``: LRU at the documented offset on parts of the session set (four halves: even and
  odd file positions, first and second half) and on the main agents alone (sub-agents left out):
  how much the sample of sessions and the sub-agents move the figure;
* ``ttl_by_gap``: where a 5-minute TTL (``ttl_5m``) loses hits against LRU: its per-request
  hits minus LRU's, summed by what preceded the request in its agent (:func:`gap_classes`);
* ``timed``: closed-loop timed replays (:func:`agentsim.replay.timed.run_timed_replay`, its
  default deployment: DeepSeek-V3 on one 4-GPU GB300 instance) at the documented offset: block
  hit ratio and TTFT percentiles with realistic serving, where each agent's next call waits for
  its previous answer.

The text (prose and the doc's tables) is written from these tables by
:mod:`agentsim.experiments.seed_study_text`.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import pandas as pd

from agentsim.cache.hit_bound import prefix_hit_upper_bound
from agentsim.errors import InputError
from agentsim.replay.cache_only import replay_cache_only
from agentsim.replay.load import load_trace
from agentsim.replay.prefix import canonicalize
from agentsim.workload.traces.agents import agent_signals
from agentsim.workload.traces.records import TraceRequest
from agentsim.workload.traces.weka import session_files

#: The seed study's published LRU hit ratios on the Claude Code sessions, by capacity in blocks.
PUBLISHED_LRU_HIT_RATIO = {8_000: 0.835, 20_000: 0.939, 50_000: 0.958}
#: The data README's arrival model: session k starts at k x 1200 s.
DOCUMENTED_OFFSET_S = 1200.0
#: The provider TTL whose cost is measured (``ttl_5m``'s ``ttl_s``).
TTL_S = 300.0
TTL_POLICY = "ttl_5m"

#: Every registered eviction policy by what it knows (a test keeps this complete).
FAMILY = {
    "lru": "recency / order", "fifo": "recency / order", "sieve": "recency / order",
    "s3fifo": "recency / order", "vllm_lru": "recency / order",
    "lfu": "frequency", "arc": "frequency", "slru": "frequency", "twoq": "frequency", "w_tinylfu": "frequency",
    "gdsf": "cost-aware", "tlru": "cost-aware",
    "ttl_5m": "provider TTL", "ttl_1h": "provider TTL", "ttl_expiry": "provider TTL",
    "ttl_pin": "agent pauses", "continuum": "agent pauses", "infercept": "agent pauses",
    "kvflow": "agent workflow",
    "belady_oracle": "oracle (agents' next calls)",
    "belady": "offline (whole future)",
}
#: Families that no deployed cache can run: left out of "best realisable policy".
UNREALISABLE_FAMILIES = ("oracle (agents' next calls)", "offline (whole future)")
#: The offline heuristic reference: furthest-next-use (MIN) on prefix blocks. Not a proven
#: upper bound in prefix mode (issue #22 item 5); the grid's ``upper_bound_hit_ratio`` is.
HEADROOM_REFERENCE = "belady"


#: Policies of the timed closed-loop view: the reference, the TTL and a pause-aware pin.
TIMED_POLICIES = ("lru", TTL_POLICY, "ttl_pin")
TABLES = ("grid", "lru_offsets", "subsets", "ttl_by_gap", "timed")


@dataclass
class StudyTables:
    """The study's tables (see the module docstring) and what was replayed."""

    grid: pd.DataFrame
    lru_offsets: pd.DataFrame
    subsets: pd.DataFrame
    ttl_by_gap: pd.DataFrame
    timed: pd.DataFrame
    sessions: int
    requests: int
    trace_dir: str

    def save(self, out_dir: str | Path) -> dict[str, str]:
        """Write every table as ``<name>.parquet`` under ``out_dir``; returns name -> path."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {}
        for name in TABLES:
            path = out / f"{name}.parquet"
            getattr(self, name).to_parquet(path, index=False)
            paths[name] = str(path)
        return paths


def gap_classes(requests: Sequence[TraceRequest], ttl_s: float = TTL_S) -> list[str]:
    """What preceded each request in its agent (requests in replay order).

    ``first call`` (a session's main agent or a sub-agent starts), else the pause kind after
    the agent's previous request (:func:`agent_signals`: ``tool``, ``human``, ``join`` when it
    waited for sub-agents, ``none`` for an unknown stop) and whether the gap exceeded ``ttl_s``
    (``tool > 5 min``). Requests without a session are ``no agent``.
    """
    pauses = agent_signals(requests).pauses
    last: dict = {}
    minutes = f"{ttl_s / 60:g} min"
    classes = []
    for i, request in enumerate(requests):
        if not request.session_id:
            classes.append("no agent")
            continue
        owner = (request.session_id, request.agent_id)
        previous = last.get(owner)
        last[owner] = i
        if previous is None:
            classes.append("first call")
            continue
        _owner, kind, gap_s = pauses[previous]
        classes.append(f"{kind or 'none'} {'>' if gap_s > ttl_s else '<='} {minutes}")
    return classes


def _row(requests: list[TraceRequest], canonical, policy: str, capacity_blocks: int, offset_s: float,
         record: bool = False) -> tuple[dict, list[int] | None]:
    result = replay_cache_only(requests, capacity_blocks=capacity_blocks, policy=policy, canonical=canonical,
                               record_requests=record)
    extra = result.extra
    row = {"policy": policy, "family": FAMILY.get(policy, "unlisted"), "capacity_blocks": capacity_blocks,
           "session_offset_s": float(offset_s), "hit_ratio": result.hit_ratio,
           "token_hit_ratio": result.token_hit_ratio, "hit_blocks": result.hit_blocks,
           "requested_blocks": result.requested_blocks, "unique_blocks": result.unique_blocks,
           "ideal_hit_ratio": result.ideal_hit_ratio, "evicted_blocks": result.evicted_blocks,
           "ttl_expirations_blocks": int(extra.get("ttl_expirations_blocks", 0)),
           "pins_created": int(extra.get("pins_created", 0)), "clock": result.clock,
           "policy_signals_missing": ",".join(extra.get("policy_signals_missing") or [])}
    return row, result.request_hit_blocks


def _load(trace_dir: str | Path, offset_s: float):
    loaded = load_trace(trace_dir, "weka", session_offset_s=offset_s)
    return loaded.requests, canonicalize(loaded.requests)


def _ttl_rows(requests: list[TraceRequest], classes: list[str], lru_hits: list[int], ttl_hits: list[int],
              capacity_blocks: int, offset_s: float) -> list[dict]:
    by_class: dict[str, list[int]] = {}
    for request, cls, lru_hit, ttl_hit in zip(requests, classes, lru_hits, ttl_hits):
        acc = by_class.setdefault(cls, [0, 0, 0, 0])
        acc[0] += 1
        acc[1] += len(request.block_keys)
        acc[2] += max(lru_hit - ttl_hit, 0)    # hits the TTL lost on this request
        acc[3] += max(ttl_hit - lru_hit, 0)    # hits it gained (room freed by expiry)
    return [{"capacity_blocks": capacity_blocks, "session_offset_s": float(offset_s), "gap_class": cls,
             "requests": acc[0], "requested_blocks": acc[1], "lost_hit_blocks": acc[2], "gained_hit_blocks": acc[3]}
            for cls, acc in sorted(by_class.items())]


def _subset_dirs(trace_dir: Path, work: Path) -> dict[str, Path]:
    """Directories of symbolic links to parts of the session set (file-name order)."""
    files = session_files(trace_dir)
    half = len(files) // 2
    parts = {"even positions": files[0::2], "odd positions": files[1::2],
             "first half": files[:half], "second half": files[half:]}
    dirs = {}
    for index, (name, chosen) in enumerate(parts.items()):
        target = work / f"part{index}"
        target.mkdir()
        for file in chosen:
            (target / file.name).symlink_to(file.resolve())
        dirs[name] = target
    return dirs


def timed_rows(trace_dir: str | Path, policies: Sequence[str], capacities_blocks: Sequence[int],
               offset_s: float = DOCUMENTED_OFFSET_S) -> list[dict]:
    """Closed-loop timed replays of the sessions, one per policy and capacity (see the module docstring)."""
    from agentsim.replay.timed import run_timed_replay

    rows = []
    for capacity in capacities_blocks:
        for policy in policies:
            summary = run_timed_replay(trace_dir, "weka", mode="closed-loop", policy=policy, capacity_blocks=capacity,
                                       session_offset_s=offset_s).summary
            rows.append({"policy": policy, "capacity_blocks": capacity, "session_offset_s": float(offset_s),
                         "block_hit_ratio": summary["block_hit_ratio"], "ttft_p50_s": summary["ttft_p50_s"],
                         "ttft_p99_s": summary["ttft_p99_s"], "requests": summary["requests"],
                         "requests_rejected": int(summary.get("requests_rejected") or 0),
                         "pins_created": int(summary.get("pins_created") or 0),
                         "tool_starts": int(summary.get("tool_starts") or 0)})
    return rows


def run_study(trace_dir: str | Path, *, policies: Iterable[str], capacities_blocks: Sequence[int],
              offsets_s: Sequence[float], lru_offsets_s: Sequence[float] = (),
              timed_policies: Sequence[str] = TIMED_POLICIES, progress=None) -> StudyTables:
    """Replay the WEKA sessions in ``trace_dir`` for every policy, capacity and offset.

    ``lru_offsets_s`` adds LRU-only offsets for the arrival-model curve (the grid's offsets are
    always in it). ``timed_policies`` run closed-loop at every capacity and the documented
    offset (``()``: none). ``progress(text)`` is called before each block of replays (or never).
    Same inputs, same tables: the replays are deterministic.
    """
    trace_dir = Path(trace_dir)
    session_files(trace_dir)   # InputError naming the directory before any replay
    policies = list(policies)
    if not policies or not capacities_blocks or not offsets_s:
        raise InputError("the seed study needs at least one policy, capacity and offset", "seed study")
    for name in ("lru", TTL_POLICY):
        if name not in policies:
            policies.insert(0, name)   # the reference and the TTL cost are always measured
    say = progress or (lambda _text: None)
    grid_rows, lru_rows, ttl_rows = [], [], []
    sessions = requests_count = 0
    all_offsets = sorted(set(map(float, offsets_s)) | set(map(float, lru_offsets_s)) | {DOCUMENTED_OFFSET_S})
    documented = None
    for offset_s in all_offsets:
        say(f"sessions {offset_s:g} s apart")
        requests, canonical = _load(trace_dir, offset_s)
        sessions = len({r.session_id for r in requests})
        requests_count = len(requests)
        if offset_s == DOCUMENTED_OFFSET_S:
            documented = requests
        in_grid = offset_s in set(map(float, offsets_s))
        classes = gap_classes(requests) if in_grid else None
        for capacity in capacities_blocks:
            if not in_grid:
                lru_rows.append(_row(requests, canonical, "lru", capacity, offset_s)[0])
                continue
            hits = {}
            bound = prefix_hit_upper_bound([r.block_keys for r in requests], capacity)
            for policy in policies:
                row, per_request = _row(requests, canonical, policy, capacity, offset_s,
                                        record=policy in ("lru", TTL_POLICY))
                row.update(upper_bound_hit_ratio=bound.hit_ratio, upper_bound_hit_blocks=bound.hit_blocks)
                grid_rows.append(row)
                if per_request is not None:
                    hits[policy] = per_request
            lru_row = next(r for r in grid_rows[::-1] if r["policy"] == "lru")
            lru_rows.append({k: v for k, v in lru_row.items() if not k.startswith("upper_bound")})
            ttl_rows += _ttl_rows(requests, classes, hits["lru"], hits[TTL_POLICY], capacity, offset_s)
    subset_rows = _subset_rows(trace_dir, documented, capacities_blocks, say)
    say("closed-loop timed replays")
    timed = pd.DataFrame(timed_rows(trace_dir, list(timed_policies), capacities_blocks),
                         columns=None if timed_policies else ["policy", "capacity_blocks", "session_offset_s"])
    lru_offsets = pd.DataFrame(lru_rows).sort_values(["capacity_blocks", "session_offset_s"]).reset_index(drop=True)
    return StudyTables(grid=pd.DataFrame(grid_rows), lru_offsets=lru_offsets, subsets=pd.DataFrame(subset_rows),
                       ttl_by_gap=pd.DataFrame(ttl_rows), timed=timed, sessions=sessions, requests=requests_count,
                       trace_dir=str(trace_dir))


def _subset_rows(trace_dir: Path, documented: list[TraceRequest], capacities_blocks: Sequence[int], say) -> list[dict]:
    rows = []
    say("session subsets and main agents only")
    with tempfile.TemporaryDirectory() as work:
        parts = _subset_dirs(trace_dir, Path(work)) if len(session_files(trace_dir)) >= 2 else {}
        loaded = {name: _load(path, DOCUMENTED_OFFSET_S) for name, path in parts.items()}
    main_only = [r for r in documented if r.depth == 0]
    loaded["main agents only"] = (main_only, canonicalize(main_only))
    for name, (requests, canonical) in loaded.items():
        for capacity in capacities_blocks:
            row = _row(requests, canonical, "lru", capacity, DOCUMENTED_OFFSET_S)[0]
            rows.append({"subset": name, "sessions": len({r.session_id for r in requests}), **row})
    return rows


def offset_reaching(curve: pd.DataFrame, target: float) -> float | None:
    """The session offset at which LRU's hit ratio on ``curve`` (one capacity, rows by offset)
    reaches ``target``, linear between the two measured offsets around it; None if no measured
    pair brackets it."""
    points = curve.sort_values("session_offset_s")[["session_offset_s", "hit_ratio"]].to_numpy()
    for (x0, y0), (x1, y1) in zip(points[:-1], points[1:]):
        if min(y0, y1) <= target <= max(y0, y1) and y0 != y1:
            return float(x0 + (target - y0) * (x1 - x0) / (y1 - y0))
        if y0 == target:
            return float(x0)
    if len(points) and math.isclose(points[-1][1], target):
        return float(points[-1][0])
    return None
