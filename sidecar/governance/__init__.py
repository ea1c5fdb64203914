"""Whether a granted tool call may run now: rules, rates, budgets, approvals and the gate that
applies them in order around the executor."""
