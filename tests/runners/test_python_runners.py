"""Python runners (pinned in scripts/install-runners.sh, each in a venv of its own), unchanged,
through the sidecar: the ``llm`` CLI and pydantic-ai."""

from __future__ import annotations

import pytest

from tests.mediation.conftest import TRADING_TOKEN
from tests.runners.conftest import RunnerPod, runner_binary
from tests.runners.provider import NOTE, QUOTE

pytestmark = pytest.mark.runners
PROMPT = "What is AAPL at? Use the quote tool."
NOTE_FUNCTION = f"""
def {NOTE}(text: str) -> str:
    "Record a note for the user."
    return "noted: " + text
"""
PYDANTIC_AI = f"""
import sys
from pydantic_ai import Agent

agent = Agent(sys.argv[1])

@agent.tool_plain
{NOTE_FUNCTION.strip()}

print(agent.run_sync({PROMPT!r}).output)
"""


def assert_one_quote(pod: RunnerPod) -> None:
    (call,) = pod.quote_calls()  # exactly one execution
    assert call.headers["Authorization"] == f"Bearer {TRADING_TOKEN}"


async def test_llm_cli_mediated_a_managed_tool(runner_pod: RunnerPod) -> None:
    llm = runner_binary("llm", venv="llm")
    env = runner_pod.env("mediated", LLM_USER_PATH=str(runner_pod.home / "llm"))
    code, out, err = await runner_pod.run([str(llm), "-m", "gpt-4o-mini", PROMPT], env)
    assert code == 0, (out + err)[-3000:]
    assert "QUOTE-OK /quotes/AAPL" in out
    assert_one_quote(runner_pod)


@pytest.mark.plan(QUOTE, NOTE)
async def test_llm_cli_mediated_a_managed_tool_then_its_own(runner_pod: RunnerPod) -> None:
    llm = runner_binary("llm", venv="llm")
    env = runner_pod.env("mediated", LLM_USER_PATH=str(runner_pod.home / "llm"))
    argv = [str(llm), "-m", "gpt-4o-mini", "--functions", NOTE_FUNCTION, PROMPT]
    code, out, err = await runner_pod.run(argv, env)
    assert code == 0, (out + err)[-3000:]
    # The hidden round came back when llm returned with its own tool's result.
    assert "QUOTE-OK /quotes/AAPL NOTE-OK" in out
    assert_one_quote(runner_pod)


@pytest.mark.parametrize("model", ["openai:gpt-4o", "anthropic:claude-sonnet-4-6"])
@pytest.mark.plan(QUOTE, NOTE)
async def test_pydantic_ai_mediated_a_managed_tool_then_its_own(
    runner_pod: RunnerPod, model: str
) -> None:
    python = runner_binary("python", venv="pydantic-ai")
    code, out, err = await runner_pod.run(
        [str(python), "-c", PYDANTIC_AI, model], runner_pod.env("mediated")
    )
    assert code == 0, (out + err)[-3000:]
    assert "QUOTE-OK /quotes/AAPL NOTE-OK" in out
    assert_one_quote(runner_pod)
