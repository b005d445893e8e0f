"""The router registry: name -> router class, with the retired names and what replaced them."""

from __future__ import annotations

from agentsim.registry import Registry

#: Names that were routers once, and the message that says what to use instead.
RETIRED_ROUTERS: dict[str, str] = {
    "prefix_affinity": ("router 'prefix_affinity' was retired into 'kv_aware' (it weighs the prefill "
                        "blocks still to compute against the worker's active blocks; see docs/routing.md)"),
}


class RouterRegistry(Registry):
    """A :class:`Registry` whose unknown-name message names the replacement of a retired router."""

    def unknown_message(self, name: str) -> str:
        retired = RETIRED_ROUTERS.get(name)
        if retired is not None:
            return f"{retired}; known: {', '.join(self.names())}"
        return super().unknown_message(name)


ROUTERS: RouterRegistry = RouterRegistry("router")
