"""Fallback routes of a pod (``x-claw.routes``, SPEC §14): model glob -> ordered targets."""

from __future__ import annotations

from ...sidecar.manifest import Provider, RouteTarget, is_model_glob
from .providers import RouteTargetSpec, brackets_balanced
from .reader import PodReader


def pod_routes(
    reader: PodReader,
    declared: dict[str, list[RouteTargetSpec]] | None,
    providers: dict[str, Provider],
) -> dict[str, list[RouteTarget]]:
    """The pod's fallback routes: every target a provider of the pod, each own model id an
    exact id. Targets may speak different protocols: each gets the request translated into
    its own (contract §18)."""
    routes: dict[str, list[RouteTarget]] = {}
    for glob, entries in (declared or {}).items():
        where = ("x-claw", "routes", glob)
        if not brackets_balanced(glob):
            raise reader.fail(f"route {glob!r}: unbalanced '[' ']' in a glob", where)
        targets = [entry.to_target() for entry in entries]
        for index, target in enumerate(targets):
            if target.provider not in providers:
                known = ", ".join(providers)
                raise reader.fail(
                    f"route {glob!r}: no provider {target.provider!r} (providers: {known})",
                    (*where, index),
                )
            if target.model is not None and is_model_glob(target.model):
                raise reader.fail(
                    f"route {glob!r}: target model {target.model!r} must be a model id, "
                    "not a pattern",
                    (*where, index),
                )
        routes[glob] = targets
    targeted = {target.provider for targets in routes.values() for target in targets}
    for name, provider in providers.items():
        if not provider.models and name not in targeted:
            raise reader.fail(
                "models: list at least 1 item, or make this provider a target of a route "
                "(x-claw.routes)",
                ("x-claw", "providers", name, "models"),
            )
    return routes
