"""Governance at compile time: its grammar, credentials and principals, rules, approvals, budgets
and taint resolved for the manifest."""
