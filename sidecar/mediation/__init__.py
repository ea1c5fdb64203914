"""Mediated mode: a sans-IO tool loop over a provider-neutral conversation, and its driver."""
