"""The cache's plugin registries: eviction policies and admission filters.

Defined here, outside ``agentsim/cache/policies/``, so that a policy module imports its
registry without importing the package ``__init__``. Every built-in is *declared* here by name
with the module that registers it; that module is imported the first time one of its names is
looked up (see :class:`agentsim.registry.Registry`), so a cache-only replay with ``lru``
imports no other policy module (nor numpy through Belady's next-use index). A test checks that
importing each module registers exactly its declared names.
"""

from __future__ import annotations

from agentsim.registry import Registry

EVICTION_POLICIES: Registry = Registry("eviction policy")
ADMISSION_FILTERS: Registry = Registry("admission filter")

# module (under agentsim.cache.policies) -> the eviction policy names it registers
POLICY_MODULES: dict[str, list[str]] = {
    "lru": ["lru"], "fifo": ["fifo"], "slru": ["slru"], "twoq": ["twoq"], "s3fifo": ["s3fifo"],
    "sieve": ["sieve"], "arc": ["arc"], "w_tinylfu": ["w_tinylfu"], "vllm_lru": ["vllm_lru"],
    "lfu": ["lfu"], "gdsf": ["gdsf"], "tlru": ["tlru"], "belady": ["belady"],
    "ttl_expiry": ["ttl_expiry", "ttl_5m", "ttl_1h"], "ttl_pin": ["ttl_pin"], "continuum": ["continuum"],
    "infercept": ["infercept"], "kvflow": ["kvflow"], "belady_oracle": ["belady_oracle"],
}
# module (under agentsim.cache.policies) -> the admission filter names it registers
ADMISSION_MODULES: dict[str, list[str]] = {
    "admission": ["admit_all", "no_decode_cache", "second_hit", "tinylfu"],
}

for _module, _names in POLICY_MODULES.items():
    EVICTION_POLICIES.declare(_names, f"agentsim.cache.policies.{_module}")
for _module, _names in ADMISSION_MODULES.items():
    ADMISSION_FILTERS.declare(_names, f"agentsim.cache.policies.{_module}")

__all__ = ["ADMISSION_FILTERS", "ADMISSION_MODULES", "EVICTION_POLICIES", "POLICY_MODULES"]
