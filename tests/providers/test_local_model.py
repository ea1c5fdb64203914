"""A real local model server through the sidecar (#45): llama-cpp-python 0.3.36 serving
SmolLM2-135M-Instruct with ``chatml-function-calling``, started by the suite on 127.0.0.1,
the real ``openai`` SDK as the client. ``scripts/install-local-model.sh`` installs both.

What a 135M model answers varies; what the sidecar does with it must not: each tool call
runs once, answer rounds stream live once a round of another kind has taught the provider
that it cannot stream tools, a Chat client asking for ``include_usage`` gets its usage
chunk, and the usage estimated for a stream without counts is near the server's own counts.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from clawpod.sidecar.manifest import Provider
from tests.providers.conftest import PodMaker, ProviderPod

pytestmark = pytest.mark.local_model

ROOT = Path(__file__).resolve().parents[2]
HOME = Path(os.environ.get("CLAW_LOCAL_MODEL_HOME", ROOT / ".local-model"))
MODEL = "smollm2"
QUOTE = [{"role": "user", "content": "What is the price of AAPL? Use the desk_quote tool."}]
HELLO = [{"role": "user", "content": "Say hello to the trading desk in one sentence."}]
# Generous: a CPU model on a shared machine; no test asserts a time.
START_S = 120.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def llama_server() -> Iterator[str]:
    """``python -m llama_cpp.server`` on 127.0.0.1; its base URL."""
    python = HOME / "venv" / "bin" / "python"
    models = sorted(HOME.glob("model/**/*.gguf"))
    if not python.exists() or not models:
        pytest.fail("no local model: run scripts/install-local-model.sh first")
    port = _free_port()
    command = [str(python), "-m", "llama_cpp.server", "--model", str(models[0])]
    command += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096"]
    command += ["--chat_format", "chatml-function-calling", "--verbose", "false"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + START_S
        while True:
            try:
                with urllib.request.urlopen(url + "/models", timeout=5):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("llama_cpp.server did not start") from None
                time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


async def local_pod(
    make_pod: PodMaker, url: str, mode: str = "mediated", **options: Any
) -> ProviderPod:
    local = Provider(
        api="openai",
        protocols=["chat"],
        base_url=url,
        key_env="AZURE_KEY",
        models=[f"{MODEL}*"],
        timeout_ms=300_000,
        **options,
    )
    return await make_pod(providers={"local": local}, routes={}, mode=mode)


def _service_calls(pod: ProviderPod) -> int:
    return sum(1 for r in pod.service.requests if r.path.startswith(("/quotes/", "/trades")))


def _calls_run(record: dict[str, Any]) -> int:
    return sum(len(round_["calls"]) for round_ in record.get("tool_trace") or ())


async def _stream(pod: ProviderPod, messages: list[dict[str, Any]], **extra: Any) -> list[Any]:
    chunks = await pod.openai(timeout=600).chat.completions.create(
        model=MODEL, messages=messages, stream=True, max_tokens=48, temperature=0, **extra
    )
    return [chunk async for chunk in chunks]


def _text_chunks(chunks: list[Any]) -> list[str]:
    return [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]


# A mediated tool loop of a 135M model on a shared CPU: minutes, not seconds.
@pytest.mark.timeout(900)
async def test_streamed_tool_rounds_run_each_tool_once(
    make_pod: PodMaker, llama_server: str
) -> None:
    """The server answers a streamed round that offers tools under ``auto`` with an empty
    stream when its model picks a tool: the round is asked again whole, the lesson audited
    for that kind of round, and no call runs twice however many rounds the model takes."""
    pod = await local_pod(make_pod, llama_server)
    # The model may call tools until its context is full: the server's 400 then ends the
    # request, and what ran before it is what is checked.
    with contextlib.suppress(openai.APIError):
        await _stream(pod, QUOTE, tool_choice="auto")
    (record,) = await pod.audit()
    ran = _calls_run(record)
    assert ran > 0, "the model called no tool: nothing was checked"
    # A call whose arguments fail its schema never reaches the service; none reaches it twice.
    assert 0 < _service_calls(pod) <= ran
    ids = [call["id"] for round_ in record["tool_trace"] for call in round_["calls"]]
    assert len(ids) == len(set(ids))  # no call ran twice
    assert record["stream_tools"]["round"] == "auto"


async def test_answer_rounds_stream_live_after_a_tool_round_lesson(
    make_pod: PodMaker, llama_server: str
) -> None:
    """``tool_choice: none`` rounds stream token by token whatever was learnt of tool rounds."""
    pod = await local_pod(make_pod, llama_server)
    await _stream(pod, QUOTE)  # a tool round under auto: the lesson, when the model calls
    chunks = await _stream(pod, HELLO, tool_choice="none")
    assert len(_text_chunks(chunks)) > 1  # live, not one piece of a round called whole
    first, answer = await pod.audit(2)
    assert "stream_tools" not in answer
    lesson = first.get("stream_tools")
    if lesson is not None:  # the model called a tool under auto: that kind of round, only
        assert lesson["provider"] == "local"
        assert lesson["round"] != "none"


async def test_a_chat_client_asking_for_include_usage_gets_its_usage_chunk(
    make_pod: PodMaker, llama_server: str
) -> None:
    """The server ignores ``stream_options``; the sidecar's estimate reaches the client."""
    pod = await local_pod(make_pod, llama_server)
    chunks = await _stream(pod, HELLO, tool_choice="none", stream_options={"include_usage": True})
    usage = chunks[-1].usage
    assert usage is not None and usage.prompt_tokens > 0 and usage.completion_tokens > 0
    (record,) = await pod.audit()
    assert record["usage"]["input_tokens"] == usage.prompt_tokens
    assert record["usage"]["output_tokens"] == usage.completion_tokens


async def test_the_usage_estimate_of_a_stream_is_within_a_quarter_of_the_servers_counts(
    make_pod: PodMaker, llama_server: str
) -> None:
    """The same answer (temperature 0) streamed, without counts, and whole, with the server's:
    the stream's estimate is within 25% of them. (Pass-through and no tools: offered tools
    under ``tool_choice: none`` the server drops them and counts the messages alone, while
    the sidecar estimates the request it sent.)"""
    pod = await local_pod(make_pod, llama_server, mode="native")
    streamed_text = "".join(_text_chunks(await _stream(pod, HELLO)))
    whole = await pod.openai(timeout=300).chat.completions.create(
        model=MODEL, messages=HELLO, max_tokens=48, temperature=0
    )
    assert whole.choices[0].message.content == streamed_text  # one answer, told twice
    streamed, counted = await pod.audit(2)
    assert streamed["usage"].get("estimated") is True
    assert "estimated" not in counted["usage"]
    for name in ("input_tokens", "output_tokens"):
        estimate, server = streamed["usage"][name], counted["usage"][name]
        print(f"{name}: estimated {estimate}, counted by the server {server}")
        assert abs(estimate - server) <= 0.25 * server, (name, estimate, server)
