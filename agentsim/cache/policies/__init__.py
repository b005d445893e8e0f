"""Registered eviction policies. Importing this package registers every built-in policy.

The registries themselves live in :mod:`agentsim.cache.registries` (a policy module imports
them from there, not from this package); they are re-exported here for callers.
"""

from agentsim.cache.registries import ADMISSION_FILTERS, EVICTION_POLICIES  # noqa: F401

# Each module registers itself; keep one import per policy module.
from agentsim.cache.policies import lru  # noqa: E402,F401
from agentsim.cache.policies import fifo  # noqa: E402,F401
from agentsim.cache.policies import slru  # noqa: E402,F401
from agentsim.cache.policies import twoq  # noqa: E402,F401
from agentsim.cache.policies import s3fifo  # noqa: E402,F401
from agentsim.cache.policies import sieve  # noqa: E402,F401
from agentsim.cache.policies import arc  # noqa: E402,F401
from agentsim.cache.policies import w_tinylfu  # noqa: E402,F401
from agentsim.cache.policies import vllm_lru  # noqa: E402,F401
from agentsim.cache.policies import lfu  # noqa: E402,F401
from agentsim.cache.policies import gdsf  # noqa: E402,F401
from agentsim.cache.policies import tlru  # noqa: E402,F401
from agentsim.cache.policies import belady  # noqa: E402,F401
from agentsim.cache.policies import ttl_expiry  # noqa: E402,F401
from agentsim.cache.policies import ttl_pin  # noqa: E402,F401
from agentsim.cache.policies import continuum  # noqa: E402,F401
from agentsim.cache.policies import infercept  # noqa: E402,F401
from agentsim.cache.policies import kvflow  # noqa: E402,F401
from agentsim.cache.policies import belady_oracle  # noqa: E402,F401
from agentsim.cache.policies import admission  # noqa: E402,F401  (A1 filters: ADMISSION_FILTERS)

__all__ = ["ADMISSION_FILTERS", "EVICTION_POLICIES"]
