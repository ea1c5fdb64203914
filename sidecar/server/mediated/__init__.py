"""Mediated mode's driver: the model calls, the tool rounds, and exactly-once around both
(over the sans-IO ``mediation/`` engine)."""
