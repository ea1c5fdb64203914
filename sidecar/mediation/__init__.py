"""Mediated mode: a sans-IO tool loop over a provider-neutral conversation, plus its aiohttp driver."""
