"""The routers live in :mod:`agentsim.cluster.routers` (one module per router); this module keeps
the old import path."""

from agentsim.cluster.routers import RETIRED_ROUTERS, ROUTERS, Router, StickySessions, make_router

__all__ = ["ROUTERS", "RETIRED_ROUTERS", "Router", "StickySessions", "make_router"]
