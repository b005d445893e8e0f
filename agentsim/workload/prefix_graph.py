"""The prefix-sharing graph: which prompts share which prefixes.

Nodes are prefix *segments* (runs of KV blocks that the same set of requests share); an edge
``u -> v`` means "v extends u". Every request's prompt is a path from the root. Built from the
prompts of a (short) simulation of a scenario, so it shows exactly what the simulated agents
send: the global system prompt shared by all classes, each class's tools prefix, each session's
history, sub-agent branches forking from a parent's history, and the new branches that
compaction or edits start (mutation points).

Node attributes: ``kind`` (global, class_prefix, session_history, subagent_branch,
after_mutation), ``tokens``, ``start_token``, ``requests`` (prompts through it), ``sessions``,
``classes``, ``label``. The graph is a plain ``networkx.DiGraph`` (exported as GraphML).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import networkx as nx


@dataclass(frozen=True)
class PromptPath:
    """One request's prompt: its full-block keys and who sent it."""

    keys: tuple[int, ...]
    session_id: int
    agent_class: str
    depth: int
    after_mutation: bool


class _TrieNode:
    __slots__ = ("keys", "children", "requests", "sessions", "classes", "depths", "mutated", "start")

    def __init__(self, keys: list[int], start: int):
        self.keys = keys
        self.start = start
        self.children: dict[int, _TrieNode] = {}
        self.requests = 0
        self.sessions: set[int] = set()
        self.classes: set[str] = set()
        self.depths: set[int] = set()
        self.mutated = False


def _insert(root: _TrieNode, prompt: PromptPath) -> None:
    keys = list(prompt.keys)
    node, pos = root, 0
    while pos < len(keys):
        child = node.children.get(keys[pos])
        if child is None:
            child = _TrieNode(keys[pos:], pos)
            node.children[keys[pos]] = child
            pos = len(keys)
        else:
            run = child.keys
            common = 0
            limit = min(len(run), len(keys) - pos)
            while common < limit and run[common] == keys[pos + common]:
                common += 1
            if common < len(run):
                upper = _TrieNode(run[:common], child.start)
                upper.requests, upper.sessions = child.requests, set(child.sessions)
                upper.classes, upper.depths, upper.mutated = set(child.classes), set(child.depths), child.mutated
                child.keys = run[common:]
                child.start += common
                upper.children[child.keys[0]] = child
                node.children[keys[pos]] = upper
                child = upper
            pos += common
        child.requests += 1
        child.sessions.add(prompt.session_id)
        child.classes.add(prompt.agent_class)
        child.depths.add(prompt.depth)
        child.mutated = child.mutated or prompt.after_mutation
        node = child


def _kind(node: _TrieNode) -> str:
    if len(node.classes) > 1:
        return "global"
    if len(node.sessions) > 1:
        return "class_prefix"
    if min(node.depths) > 0:
        return "subagent_branch"
    if node.mutated:
        return "after_mutation"
    return "session_history"


def build_prefix_graph(prompts: list[PromptPath], block_tokens: int) -> nx.DiGraph:
    """The prefix-sharing graph of ``prompts`` (node ids are stable, in insertion order)."""
    root = _TrieNode([], 0)
    for prompt in prompts:
        _insert(root, prompt)
    graph = nx.DiGraph(block_tokens=block_tokens, prompts=len(prompts))
    graph.add_node("root", kind="root", tokens=0, start_token=0, requests=len(prompts), sessions=0, classes="", label="root")
    counter = 0
    stack = [("root", root)]
    while stack:
        parent_id, parent = stack.pop()
        for first_key in sorted(parent.children):
            child = parent.children[first_key]
            counter += 1
            node_id = f"n{counter}"
            kind = _kind(child)
            tokens = len(child.keys) * block_tokens
            graph.add_node(node_id, kind=kind, tokens=tokens, start_token=child.start * block_tokens,
                           requests=child.requests, sessions=len(child.sessions),
                           classes=",".join(sorted(child.classes)),
                           label=f"{kind.replace('_', ' ')}\n{tokens:,} tok, {child.requests} req")
            graph.add_edge(parent_id, node_id, relation="extends")
            stack.append((node_id, child))
    return graph


def sharing_statistics(graph: nx.DiGraph) -> dict:
    """Tokens per kind of segment, expected fan-out and the share of prompt tokens shared.

    * ``tokens_by_kind``: distinct tokens held in segments of each kind;
    * ``prompt_tokens_by_kind``: prompt tokens (summed over requests) that fall in each kind;
    * ``shared_prompt_fraction``: share of prompt tokens in segments used by more than one session;
    * ``reused_prompt_fraction``: share of prompt tokens that an earlier prompt already contained
      (the unbounded-cache hit ratio of these prompts);
    * ``mean_fanout``: mean number of children of segments that branch (more than one child).
    """
    tokens_by_kind: dict[str, int] = defaultdict(int)
    prompt_tokens_by_kind: dict[str, int] = defaultdict(int)
    total = shared = reused = 0
    fanouts = []
    for node, data in graph.nodes(data=True):
        if node == "root":
            continue
        tokens_by_kind[data["kind"]] += data["tokens"]
        through = data["tokens"] * data["requests"]
        prompt_tokens_by_kind[data["kind"]] += through
        total += through
        if data["sessions"] > 1:
            shared += through
        reused += data["tokens"] * (data["requests"] - 1)
        degree = graph.out_degree(node)
        if degree > 1:
            fanouts.append(degree)
    return {
        "segments": graph.number_of_nodes() - 1,
        "prompts": graph.graph.get("prompts", 0),
        "tokens_by_kind": dict(sorted(tokens_by_kind.items())),
        "prompt_tokens_by_kind": dict(sorted(prompt_tokens_by_kind.items())),
        "shared_prompt_fraction": shared / total if total else 0.0,
        "reused_prompt_fraction": reused / total if total else 0.0,
        "mean_fanout": sum(fanouts) / len(fanouts) if fanouts else 0.0,
        "root_fanout": graph.out_degree("root"),
    }


KIND_COLOURS = {"global": "#4c72b0", "class_prefix": "#55a868", "session_history": "#c8c8c8",
                "subagent_branch": "#dd8452", "after_mutation": "#c44e52", "root": "#000000"}


def draw_prefix_graph(graph: nx.DiGraph, path, title: str = "prefix-sharing graph", max_rows: int = 80) -> None:
    """An icicle drawing: each segment is a bar from its first to its last token (x axis), one row
    per leaf path; colours by kind. Readable for hundreds of segments."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rows: dict[str, float] = {}
    next_row = [0]

    def place(node):
        children = list(graph.successors(node))
        if not children:
            rows[node] = next_row[0]
            next_row[0] += 1
            return rows[node]
        ys = [place(child) for child in children]
        rows[node] = sum(ys) / len(ys)
        return rows[node]

    import sys

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    place("root")
    n_rows = max(1, next_row[0])
    height = min(max(3.0, 0.18 * n_rows + 1.5), 40.0)
    fig, ax = plt.subplots(figsize=(12, height))
    for node, data in graph.nodes(data=True):
        if node == "root":
            continue
        y = rows[node]
        ax.barh(y, data["tokens"], left=data["start_token"], height=0.7 if graph.out_degree(node) == 0 else 0.35,
                color=KIND_COLOURS.get(data["kind"], "#999999"), edgecolor="white", linewidth=0.3)
        if data["tokens"] >= 0.08 * max(1, ax.get_xlim()[1]) and data["requests"] > 1:
            ax.text(data["start_token"] + data["tokens"] / 2, y, f"{data['requests']} req", ha="center", va="center", fontsize=6)
    for u, v in graph.edges():
        if u == "root":
            continue
        x = graph.nodes[v]["start_token"]
        ax.plot([x, x], [rows[u], rows[v]], color="#555555", linewidth=0.4)
    ax.set_xlabel("prompt position (tokens)")
    ax.set_ylabel("prompt paths (one row per leaf)")
    ax.set_yticks([])
    ax.invert_yaxis()
    ax.set_title(title)
    kinds = sorted({d["kind"] for _, d in graph.nodes(data=True) if d["kind"] != "root"})
    ax.legend(handles=[Patch(color=KIND_COLOURS[k], label=k.replace("_", " ")) for k in kinds], loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
