"""Governance at compile time: credentials and principals checked, rules, approvals, budgets
and taint resolved for the manifest."""
