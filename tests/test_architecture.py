"""The layers of ../shared/DESIGN.md section 2, checked on the import graph of the package.

Every ``import agentsim...`` (at module level or inside a function: a lazy import still couples
the layers) must point to the same layer or one below. Module-level imports must not form a
cycle. No module may grow past ``MAX_MODULE_LINES`` (small modules with one concept each).
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "agentsim"

# Lowest first. The shared helpers (errors, YAML text, bounded input files, validated result
# files and their row-group writer, staged run directories, the packaged examples' location) sit
# below config; the plugin registry reads parameter units from config; metrics and results (typed
# records and summaries) sit below the cache so that the engine can fill them; plots and the
# report are presentation (sweep figures use experiments/ statistics).
LAYERS: list[set[str]] = [
    {"agentsim", "errors", "yaml_text", "input_files", "result_files", "parquet_out", "run_directory", "examples",
     "memory_release"},
    {"config"},
    {"registry", "workload", "metrics", "results"},
    {"cache"},
    {"cluster", "hardware"},
    {"engine"},
    {"experiments", "replay"},
    {"plots", "plot_style", "sweep_plots", "hierarchy_plots", "report", "report_tables"},
    {"commands", "cli"},
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}
MAX_MODULE_LINES = 550


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _area(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "agentsim"


def _imports(path: Path) -> list[tuple[str, bool, int]]:
    """(imported agentsim module, at module level?, line) for every import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top_level = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            # ``from agentsim import plots`` imports the module agentsim.plots.
            if node.module == "agentsim":
                names = [f"agentsim.{alias.name}" for alias in node.names]
        for name in names:
            if name == "agentsim" or name.startswith("agentsim."):
                found.append((name, id(node) in top_level, node.lineno))
    return found


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def test_every_area_of_the_package_has_a_layer():
    areas = {_area(module) for module in _modules()}
    assert areas <= set(RANK), f"areas without a layer in LAYERS: {sorted(areas - set(RANK))}"


def test_no_import_points_up_the_layers():
    upward = []
    for module, path in sorted(_modules().items()):
        for imported, _, line in _imports(path):
            source, target = _area(module), _area(imported)
            if RANK.get(target, -1) > RANK[source]:
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {source} imports {imported} ({target} is above)")
    assert not upward, "\n".join(upward)


def test_module_level_imports_form_no_cycle():
    modules = _modules()
    graph = nx.DiGraph()
    for module, path in modules.items():
        graph.add_node(module)
        for imported, at_top, _ in _imports(path):
            # ``from agentsim.x import y`` may name a function, not a module: keep module targets.
            target = imported if imported in modules else imported.rsplit(".", 1)[0]
            if at_top and target in modules and target != module:
                graph.add_edge(module, target)
    # A package's __init__ importing its own submodules is the usual re-export, not a cycle to
    # break; only cycles between distinct modules outside that pattern count.
    cycles = [cycle for cycle in nx.simple_cycles(graph)
              if not all(other.startswith(cycle[0] + ".") or cycle[0].startswith(other + ".")
                         for other in cycle[1:])]
    assert not cycles, f"import cycles: {cycles[:5]}"


@pytest.mark.parametrize("area", sorted({name for names in LAYERS for name in names}))
def test_modules_stay_small(area):
    too_long = []
    for module, path in _modules().items():
        if _area(module) != area:
            continue
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            too_long.append(f"{path.relative_to(PACKAGE.parent)}: {lines} lines")
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines: {too_long}"


def test_the_layer_check_sees_an_upward_import(tmp_path):
    """The checker itself: a cache module importing the engine is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from agentsim.engine.simulation import Simulation\n")
    (imported, at_top, line), = _imports(bad)
    assert imported == "agentsim.engine.simulation" and not at_top and line == 2
    assert RANK[_area(imported)] > RANK["cache"]
