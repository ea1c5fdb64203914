"""Model routing: ``provider/model`` or the first provider of the route's API whose globs match."""

from __future__ import annotations

from fnmatch import fnmatchcase

from clawpod.sidecar.codecs import codec_for_api
from clawpod.sidecar.codecs.base import ProviderApi
from clawpod.sidecar.manifest import Provider, SidecarConfig
from clawpod.sidecar.model.errors import ApiError

Api = ProviderApi
_CACHE_LIMIT = 4096


class ModelRouter:
    """Resolves a requested model to (provider name, provider, upstream model), memoised."""

    def __init__(self, config: SidecarConfig) -> None:
        self._providers = config.providers
        self._by_api: dict[str, list[tuple[str, Provider]]] = {"openai": [], "anthropic": []}
        for name, provider in config.providers.items():
            self._by_api[provider.api].append((name, provider))
        self._cache: dict[tuple[str, str], tuple[str, Provider, str]] = {}

    def resolve(self, api: Api, model: object) -> tuple[str, Provider, str]:
        if not isinstance(model, str) or not model:
            raise ApiError(400, "model_required", "the request must name a model")
        key = (api, model)
        found = self._cache.get(key)
        if found is None:
            found = self._resolve(api, model)
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = found
        return found

    def _resolve(self, api: Api, model: str) -> tuple[str, Provider, str]:
        prefix, slash, rest = model.partition("/")
        if slash and prefix in self._providers:
            provider = self._providers[prefix]
            if provider.api != api:
                raise ApiError(
                    400,
                    "wrong_api_for_provider",
                    f"provider {prefix!r} serves the {provider.api} API; "
                    f"send this request to {codec_for_api(provider.api).route}",
                )
            if _matches(provider, rest):
                return prefix, provider, rest
            raise self._not_allowed(api, model)
        for name, provider in self._by_api[api]:
            if _matches(provider, model):
                return name, provider, model
        raise self._not_allowed(api, model)

    def first_provider(self, api: Api) -> str:
        """The provider that takes a request of ``api`` that names no model."""
        if not self._by_api[api]:
            raise ApiError(400, "no_provider", f"no provider of this pod serves the {api} API")
        return self._by_api[api][0][0]

    def allowed(self, api: Api) -> list[str]:
        """Human-readable allowed models for ``api``: ``provider: glob, glob``."""
        return [f"{name}: {', '.join(p.models)}" for name, p in self._by_api[api]]

    def patterns(self) -> list[tuple[str, str]]:
        """(provider name, model glob) for every provider, in configuration order."""
        return [(name, glob) for name, p in self._providers.items() for glob in p.models]

    def _not_allowed(self, api: Api, model: str) -> ApiError:
        allowed = "; ".join(self.allowed(api)) or "none (no provider serves this API)"
        return ApiError(
            400, "model_not_allowed", f"model {model!r} is not allowed here; allowed: {allowed}"
        )


def _matches(provider: Provider, model: str) -> bool:
    return any(fnmatchcase(model, glob) for glob in provider.models)
