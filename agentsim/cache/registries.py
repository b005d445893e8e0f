"""The cache's plugin registries: eviction policies and admission filters.

Defined here, outside ``agentsim/cache/policies/``, so that a policy module imports its
registry without importing the package ``__init__`` that imports every policy module. The
first lookup imports that package, which registers every built-in (see
:class:`agentsim.registry.Registry`).
"""

from __future__ import annotations

from agentsim.registry import Registry

EVICTION_POLICIES: Registry = Registry("eviction policy", plugins="agentsim.cache.policies")
ADMISSION_FILTERS: Registry = Registry("admission filter", plugins="agentsim.cache.policies")

__all__ = ["ADMISSION_FILTERS", "EVICTION_POLICIES"]
