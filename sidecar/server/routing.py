"""Model routing: ``provider/model``, else the first fallback route (``routes``) whose glob
matches, else the first provider whose globs match, those of the route's API first (SPEC §4.1,
§14). A target of another protocol than the caller's gets the request translated (§18).

A caller's route to a model is planned once (``RoutePlan``, memoised): besides its targets, it
says whether the request can need the failover walk or a translation at all, so the request
path of a plain route (one provider, one key, the caller's protocol) calls neither."""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from ..codecs.base import ProviderApi
from ..manifest import MODEL_GLOB_CHARACTERS, Provider, SidecarConfig, is_model_glob
from ..model.errors import ApiError
from ..model.known_models import KNOWN_MODELS
from ..translation import target_protocol

Api = ProviderApi
_CACHE_LIMIT = 4096
# A request's upstream candidates in order: (provider name, provider, upstream model).
Target = tuple[str, Provider, str]


@dataclass(frozen=True, slots=True)
class RoutePlan:
    """What a request of one protocol for one model needs, decided once."""

    targets: list[Target]
    walks: bool
    """More than one target, a key pool or a first-byte bound: the failover walk decides
    (``failover.py``); else the one target is sent to directly."""
    crosses: bool
    """Some target speaks another protocol than the caller: the request is translated for it
    (``translated.py``)."""


def plan_route(protocol: str, targets: list[Target]) -> RoutePlan:
    """The plan of a request in ``protocol`` to ``targets``."""
    provider = targets[0][1]
    walks = (
        len(targets) > 1
        or len(provider.key_envs) > 1  # a key pool (``KeyPool.pooled``)
        or provider.first_byte_timeout_ms is not None
    )
    crosses = any(target_protocol(protocol, p.served) != protocol for _, p, _ in targets)
    return RoutePlan(targets, walks, crosses)


class ModelRouter:
    """Resolves a requested model to its targets (provider name, provider, upstream model),
    memoised."""

    def __init__(self, config: SidecarConfig) -> None:
        self._providers = config.providers
        self._by_api: dict[str, list[tuple[str, Provider]]] = {"openai": [], "anthropic": []}
        for name, provider in config.providers.items():
            self._by_api[provider.api].append((name, provider))
        # Routes of every API: a target of another protocol gets the request translated.
        self._routes = [
            (glob, [(t.provider, t.model) for t in targets])
            for glob, targets in (config.routes or {}).items()
        ]
        self._cache: dict[tuple[str, str], list[Target]] = {}
        self._plans: dict[tuple[str, str], RoutePlan] = {}

    def resolve(self, api: Api, model: object) -> tuple[str, Provider, str]:
        """The first target of ``model``."""
        return self.route(api, model)[0]

    def route(self, api: Api, model: object) -> list[Target]:
        """Every target of ``model`` in failover order (one, unless a fallback route matches)."""
        if not isinstance(model, str) or not model:
            raise ApiError(400, "model_required", "the request must name a model")
        key = (api, model)
        found = self._cache.get(key)  # (a pattern is refused below, never cached)
        if found is None:
            if is_model_glob(model):
                # A pattern from a model list would be forwarded verbatim and fail upstream.
                raise ApiError(
                    400,
                    "model_is_a_pattern",
                    f"model {model!r} is a pattern, not a model id; name one model "
                    "(GET /v1/models lists them)",
                )
            found = self._resolve(api, model)
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = found
        return found

    def plan(self, api: Api, protocol: str, model: object) -> RoutePlan:
        """The plan of a request in ``protocol`` (of ``api``) for ``model``, memoised."""
        found = self._plans.get((protocol, model)) if isinstance(model, str) else None
        if found is None:
            found = plan_route(protocol, self.route(api, model))  # refuses what is no model id
            if len(self._plans) >= _CACHE_LIMIT:
                self._plans.clear()
            self._plans[protocol, model] = found  # type: ignore[index]
        return found

    def _resolve(self, api: Api, model: str) -> list[Target]:
        prefix, slash, _ = model.partition("/")
        if not (slash and prefix in self._providers):
            for glob, targets in self._routes:
                if fnmatchcase(model, glob):
                    return [(name, self._providers[name], own or model) for name, own in targets]
        return [self._resolve_provider(api, model)]

    def _resolve_provider(self, api: Api, model: str) -> Target:
        prefix, slash, rest = model.partition("/")
        if slash and prefix in self._providers:
            provider = self._providers[prefix]
            if _matches(provider, rest):
                return prefix, provider, rest
            raise self._not_allowed(api, model)
        # The caller's own API first; a provider of another protocol gets a translation.
        other = "anthropic" if api == "openai" else "openai"
        for name, provider in (*self._by_api[api], *self._by_api[other]):
            if _matches(provider, model):
                return name, provider, model
        raise self._not_allowed(api, model)

    def first_provider(self, api: Api, protocol: str | None = None) -> str:
        """The provider that takes a request of ``api`` that names no model: the first that
        serves ``protocol`` (a stored response is read where responses are stored)."""
        for name, provider in self._by_api[api]:
            if protocol is None or protocol in provider.served:
                return name
        what = f"the {api} API" if protocol is None else f"the {protocol} protocol"
        raise ApiError(400, "no_provider", f"no provider of this pod serves {what}")

    def allows(self, api: Api, model: str) -> bool:
        """Whether a request of ``api`` may name ``model``."""
        try:
            self.resolve(api, model)
        except ApiError:
            return False
        return True

    def exact_models(self, api: Api) -> list[tuple[str, str]]:
        """(provider name, model id) of every exact id the providers of ``api`` list, then of
        every known id (``model/known_models.py``) their globs route, each under the provider
        a request for it would reach. A glob that matches anything (``*``) adds none: it names
        no family, so the table cannot say what the server behind it serves."""
        seen: set[str] = set()
        listed = []
        for name, provider in self._by_api[api]:
            for model in provider.exact_models:
                if model not in seen:
                    seen.add(model)
                    listed.append((name, model))
        for model in KNOWN_MODELS:
            if model in seen or not any(
                _names_a_family(glob) and fnmatchcase(model, glob)
                for _, provider in self._by_api[api]
                for glob in provider.models
            ):
                continue
            seen.add(model)
            listed.append((self.resolve(api, model)[0], model))
        return listed

    def allowed(self, api: Api) -> list[str]:
        """Human-readable allowed models for ``api``: ``provider: glob, glob``."""
        return [f"{name}: {', '.join(p.models)}" for name, p in self._by_api[api]]

    def _not_allowed(self, api: Api, model: str) -> ApiError:
        other = "anthropic" if api == "openai" else "openai"
        allowed = "; ".join(self.allowed(api) + self.allowed(other)) or "none"
        return ApiError(
            400, "model_not_allowed", f"model {model!r} is not allowed here; allowed: {allowed}"
        )


def _matches(provider: Provider, model: str) -> bool:
    return any(fnmatchcase(model, glob) for glob in provider.models)


def _names_a_family(glob: str) -> bool:
    """A glob with a literal prefix (``gpt-*``, ``o3*``), not one that matches anything."""
    return is_model_glob(glob) and glob[0] not in MODEL_GLOB_CHARACTERS
