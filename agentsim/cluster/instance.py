"""Compatibility path: the serving instance and its collaborators live in
:mod:`agentsim.cluster.serving`; these names are re-exported for existing imports."""

from agentsim.cluster.serving.batch import DecodingSet as _DecodingSet, Running as _Running  # noqa: F401
from agentsim.cluster.serving.instance import ServingInstance  # noqa: F401
from agentsim.cluster.serving.load_rules import (  # noqa: F401
    LOAD_RULES, AlwaysLoad, CostModelRule, LoadRule, NeverLoad,
)
