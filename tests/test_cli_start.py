"""The command line imports what a command needs: lazy commands, policies and replay exports."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

from agentsim.cache.policies import ADMISSION_FILTERS, ADMISSION_MODULES, EVICTION_POLICIES, POLICY_MODULES
from tests.conftest import ROOT, run_cli

MOONCAKE40 = ROOT / "tests" / "fixtures" / "traces" / "mooncake_head40.jsonl"


def _modules_after(code: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_a_cache_only_replay_process_imports_neither_numpy_nor_pandas_nor_other_policies():
    modules = _modules_after(
        "from agentsim.cli import main\n"
        "try:\n"
        f"    main(['replay', {str(MOONCAKE40)!r}, '--mode', 'cache-only', '--policy', 'lru', '--json'])\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n")
    assert "agentsim.cache.policies.lru" in modules
    assert not {"numpy", "pandas", "scipy", "simpy", "matplotlib"} & modules
    assert not any(m.startswith("agentsim.cache.policies.") and m != "agentsim.cache.policies.lru" for m in modules)
    # only the replay command was registered
    assert "agentsim.commands.replay" in modules and "agentsim.commands.run" not in modules


def test_every_declared_policy_registers_exactly_its_names():
    for module, names in POLICY_MODULES.items():
        importlib.import_module(f"agentsim.cache.policies.{module}")
        for name in names:
            assert EVICTION_POLICIES.get(name).__module__ == f"agentsim.cache.policies.{module}"
    registered = set(EVICTION_POLICIES._classes)  # every module imported now
    assert registered >= {n for names in POLICY_MODULES.values() for n in names}
    assert set(EVICTION_POLICIES.names()) == registered


def test_every_declared_admission_filter_registers_exactly_its_names():
    for module, names in ADMISSION_MODULES.items():
        importlib.import_module(f"agentsim.cache.policies.{module}")
        for name in names:
            assert ADMISSION_FILTERS.get(name).__module__ == f"agentsim.cache.policies.{module}"
    assert set(ADMISSION_FILTERS.names()) == set(ADMISSION_FILTERS._classes)


def test_a_plugin_package_registry_imports_its_package_on_first_lookup_of_an_undeclared_name(tmp_path, monkeypatch):
    from agentsim.registry import Registry

    registry = Registry("test kind", plugins="registry_plugins_under_test")
    (tmp_path / "registry_plugins_under_test.py").write_text(
        "from tests.test_cli_start import PLUGIN_REGISTRIES\n"
        "@PLUGIN_REGISTRIES[0].register('from_package')\n"
        "class PackagePlugin:\n"
        "    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    PLUGIN_REGISTRIES[:] = [registry]
    registry.declare(["declared_elsewhere"], "registry_module_never_imported")
    try:
        assert "declared_elsewhere" in registry  # a declared name is known without any import
        assert "registry_plugins_under_test" not in sys.modules
        assert registry.get("from_package").__name__ == "PackagePlugin"
        assert registry.names() == ["declared_elsewhere", "from_package"]
    finally:
        sys.modules.pop("registry_plugins_under_test", None)
        PLUGIN_REGISTRIES.clear()


PLUGIN_REGISTRIES: list = []


def test_help_lists_every_command_and_version_prints_the_package_version():
    from importlib.metadata import version

    from agentsim.commands import COMMAND_MODULES

    helped = run_cli("--help")
    assert helped.returncode == 0
    for name in COMMAND_MODULES:
        command = name.replace("_", "-")  # check_timing is the check-timing command
        assert f" {command} " in helped.stdout, command
    shown = run_cli("--version")
    assert shown.returncode == 0 and shown.stdout.strip() == f"agentsim {version('agentsim')}"


def test_a_single_command_app_still_parses_as_a_subcommand():
    proc = run_cli("replay", str(MOONCAKE40), "--capacity-blocks", "50", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["requests"] == 40
    unknown = run_cli("replya", str(MOONCAKE40))
    assert unknown.returncode == 2 and "No such command" in unknown.stderr


def test_help_imports_neither_numpy_nor_pandas():
    modules = _modules_after(
        "from agentsim.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n")
    assert "agentsim.commands.run" in modules   # every command was registered for the listing
    assert not {"numpy", "pandas", "simpy"} & modules


def test_a_dashed_command_builds_only_its_own_module():
    modules = _modules_after(
        "from agentsim.cli import main\n"
        "try:\n"
        "    main(['check-timing', '--help'])\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n")
    assert "agentsim.commands.check_timing" in modules and "agentsim.commands.run" not in modules
