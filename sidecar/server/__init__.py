"""The sidecar's aiohttp server: identity, model routing, pass-through and the HTTP routes."""
