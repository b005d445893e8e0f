"""Registered eviction policies and admission filters, one module each.

The registries live in :mod:`agentsim.cache.registries` (a policy module imports them from
there, not from this package), where every built-in is declared by name and its module is
imported on first lookup; they are re-exported here for callers. Importing this package
imports no policy module.
"""

from agentsim.cache.registries import (  # noqa: F401
    ADMISSION_FILTERS,
    ADMISSION_MODULES,
    EVICTION_POLICIES,
    POLICY_MODULES,
)

__all__ = ["ADMISSION_FILTERS", "ADMISSION_MODULES", "EVICTION_POLICIES", "POLICY_MODULES"]
