"""Daily budgets (governance/budgets.py over state/budgets.py): USD beside tokens, held
estimates, restarts."""

from __future__ import annotations

from pathlib import Path

from clawpod.sidecar.governance.budgets import TokenBudgets
from clawpod.sidecar.manifest import Governance


def _budgets(state: Path, day: list[str]) -> TokenBudgets:
    governance = Governance(budgets={"*": 1000}, usd_budgets={"a": 1.0})
    return TokenBudgets(governance, ["a", "b"], state, today=lambda: day[0])


def test_usd_spent_survives_a_restart_and_renews_the_next_day(tmp_path: Path) -> None:
    day = ["2026-11-25"]
    budgets = _budgets(tmp_path, day)
    assert budgets.admit("a", 10, 0.5)
    budgets.release("a", 10, 0.5)
    budgets.spend("a", 10, 1.25)
    restarted = _budgets(tmp_path, day)
    assert not restarted.admit("a", 1, 0.0)  # $1.25 of $1 spent
    assert restarted.admit("b", 1, 0.0)  # b has a token budget only, untouched
    day[0] = "2026-11-26"
    assert restarted.admit("a", 1, 0.0)


def test_a_held_estimate_keeps_parallel_requests_out_until_released(tmp_path: Path) -> None:
    budgets = _budgets(tmp_path, ["2026-11-25"])
    assert budgets.admit("b", 600, 0.0)  # alone: admitted on any remainder
    assert not budgets.admit("b", 600, 0.0)  # beside it, it does not fit
    assert budgets.admit("b", 300, 0.0)  # a smaller one does
    budgets.release("b", 600, 0.0)
    budgets.release("b", 300, 0.0)
    assert budgets.admit("b", 600, 0.0)


def test_an_unreadable_store_counts_from_zero(tmp_path: Path) -> None:
    (tmp_path / "budgets.json").write_text("{not json")
    assert _budgets(tmp_path, ["2026-11-25"]).admit("a", 1, 0.0)


def test_one_agents_running_requests_hold_nothing_of_anothers(tmp_path: Path) -> None:
    budgets = _budgets(tmp_path, ["2026-11-25"])
    assert budgets.admit("a", 900, 0.9)
    assert budgets.admit("b", 900, 0.0)  # b's budget is its own
    budgets.spend("a", 1000, 0.0)  # a's day is spent; b's is not
    assert not budgets.admit("a", 1, 0.0)
    assert budgets.admit("b", 50, 0.0)  # 950 of b's 1000 held
    assert not budgets.admit("b", 100, 0.0)  # 1,050 would not fit
