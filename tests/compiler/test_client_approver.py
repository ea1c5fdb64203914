"""``approver: client | operator`` on confirm rules (SPEC §16), checked by ``clawc compile``."""

from __future__ import annotations

import pytest

from tests.compiler.conftest import PodDir
from tests.compiler.test_governance import desk, desk_pod

__all__ = ["desk"]  # the fixture, shared with the governance grammar's tests


def test_approver_reaches_the_manifest_and_defaults_to_the_operator(desk: PodDir) -> None:
    rules = (
        "  tool-rules:\n"
        "    - {tool: desk.execute_trade, effect: confirm, approver: client}\n"
        "    - {tool: desk.get_quote, effect: confirm}\n"
    )
    governance = desk.compile(desk_pod(rules)).governance
    assert governance is not None
    assert [r.approver for r in governance.rules["trader"]] == ["client", "operator"]


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ("{tool: desk.get_quote, effect: deny, approver: client}", "needs effect: confirm"),
        ("{tool: desk.get_quote, approver: operator}", "needs effect: confirm"),
        ("{tool: desk.get_quote, effect: confirm, approver: user}", "approver"),
    ],
)
def test_a_misplaced_or_unknown_approver_is_a_located_compile_error(
    desk: PodDir, rule: str, message: str
) -> None:
    error = desk.error(desk_pod(f"  tool-rules:\n    - {rule}\n"))
    assert message in str(error)
    assert f"pod.yml:{desk.line_of(rule)}" in str(error)
