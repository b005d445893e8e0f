"""YAML parsing with libyaml's parser when PyYAML has it, within a node budget.

``CSafeLoader`` is PyYAML's ``SafeLoader`` with the scanner and parser in C: the same resolver
and constructors, so the same values, and nodes carry the same line marks. It parses the fit
files and scenarios about ten times faster than the pure-Python parser, which took a tenth of
a default run. PyYAML built without libyaml falls back to the pure-Python ``SafeLoader``.

Aliases make a small text stand for a huge document (a "billion laughs" bomb: each level
repeats the one below ten times). PyYAML shares the aliased objects, but everything that walks
the document afterwards (line maps, ``--set`` copies, pydantic) visits each repetition, so a
1.6 KB file takes minutes and gigabytes. :func:`load_document` therefore composes the node
graph once, counts the nodes it stands for *with aliases expanded* (memoised per node, so the
count itself is linear in the text) and refuses a document above :data:`DEFAULT_MAX_YAML_NODES`
before constructing anything. A recursive alias (``&a [*a]``) is refused too: it has no finite
expansion. The budget is raised on purpose with ``AGENTSIM_MAX_YAML_NODES``.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

from agentsim.errors import InputError
from agentsim.input_files import env_limit

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: Most YAML nodes (scalars, mappings, sequences, aliases expanded) in one document. The
#: largest shipped scenario has about 300 and a fit file about 2,000; 200,000 leaves room for
#: long empirical value lists while keeping every walk of the document well under a second.
DEFAULT_MAX_YAML_NODES = 200_000
MAX_YAML_NODES_ENV = "AGENTSIM_MAX_YAML_NODES"


def safe_load(text: str) -> Any:
    """``yaml.safe_load(text)`` (raises ``yaml.YAMLError`` the same way)."""
    return yaml.load(text, Loader=SAFE_LOADER)


def compose(text: str) -> yaml.Node | None:
    """``yaml.compose(text, Loader=SafeLoader)``: the node graph, with line marks."""
    return yaml.compose(text, Loader=SAFE_LOADER)


def expanded_node_count(root: yaml.Node, source: str, budget: int) -> int:
    """Nodes of ``root`` with every alias expanded; InputError past ``budget`` or on a cycle.

    Iterative (no recursion limit) and memoised by node identity, so an alias bomb is counted
    in time linear in its text."""
    sizes: dict[int, int] = {}
    in_progress: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        children: list[yaml.Node] = []
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                children.extend((key_node, value_node))
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        if not children_done:
            if key in in_progress:
                raise InputError("recursive YAML alias (a node that contains itself) has no finite value",
                                 source, f"line {node.start_mark.line + 1}")
            in_progress.add(key)
            stack.append((node, True))
            for child in children:
                if id(child) not in sizes:
                    if id(child) in in_progress:
                        raise InputError("recursive YAML alias (a node that contains itself) has no finite value",
                                         source, f"line {child.start_mark.line + 1}")
                    stack.append((child, False))
            continue
        in_progress.discard(key)
        size = 1 + sum(sizes[id(child)] for child in children)
        if size > budget:
            raise InputError(f"YAML document expands to more than {budget:,} nodes (aliases expanded); "
                             f"an alias bomb? (raise the limit with {MAX_YAML_NODES_ENV}=N if this is intended)",
                             source, f"line {node.start_mark.line + 1}")
        sizes[key] = size
    return sizes.get(id(root), 0)


def _long_scalar_line(root: yaml.Node) -> str | None:
    """``line N`` of the longest scalar under ``root`` (the one a ValueError of the constructor
    is about: only an over-long integer makes the safe constructor raise one)."""
    longest: yaml.Node | None = None
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            if longest is None or len(node.value) > len(longest.value):
                longest = node
        elif isinstance(node, yaml.MappingNode):
            stack.extend(n for pair in node.value for n in pair)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return None if longest is None else f"line {longest.start_mark.line + 1}"


def load_document(text: str, source: str) -> tuple[Any, yaml.Node | None]:
    """(data, node graph) of one YAML document, after the expanded-size check.

    Raises ``yaml.YAMLError`` for a syntax error and InputError for a document over budget."""
    budget = env_limit(MAX_YAML_NODES_ENV, DEFAULT_MAX_YAML_NODES)
    loader = SAFE_LOADER(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None, None
        expanded_node_count(root, source, budget)
        try:
            return loader.construct_document(root), root
        except ValueError as exc:  # an integer past Python's digit limit (sys.get_int_max_str_digits)
            raise InputError(f"a number too long to read (more than {sys.get_int_max_str_digits():,} digits)",
                             source, _long_scalar_line(root)) from None
    finally:
        loader.dispose()
