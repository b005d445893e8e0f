"""Registered eviction policies: every built-in policy is declared here and imported on first use."""

from agentsim.registry import Registry

EVICTION_POLICIES: Registry = Registry("eviction policy")

# Each module registers its names when imported; a module is imported the first time one of its
# names is looked up (a cache-only replay with ``lru`` imports no other policy). A test checks
# that importing every module registers exactly these names.
POLICY_MODULES: dict[str, list[str]] = {
    "lru": ["lru"], "fifo": ["fifo"], "slru": ["slru"], "twoq": ["twoq"], "s3fifo": ["s3fifo"],
    "sieve": ["sieve"], "arc": ["arc"], "w_tinylfu": ["w_tinylfu"], "vllm_lru": ["vllm_lru"],
    "lfu": ["lfu"], "gdsf": ["gdsf"], "tlru": ["tlru"], "belady": ["belady"],
    "ttl_expiry": ["ttl_expiry", "ttl_5m", "ttl_1h"], "ttl_pin": ["ttl_pin"], "continuum": ["continuum"],
    "infercept": ["infercept"], "kvflow": ["kvflow"], "belady_oracle": ["belady_oracle"],
}
for _module, _names in POLICY_MODULES.items():
    EVICTION_POLICIES.declare(_names, f"agentsim.cache.policies.{_module}")

__all__ = ["EVICTION_POLICIES", "POLICY_MODULES"]
