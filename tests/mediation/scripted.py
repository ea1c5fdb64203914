"""Drive the sans-IO engine without sockets: scripted model replies and tool outcomes."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from clawpod.sidecar.execution.executor import ArgumentCheck
from clawpod.sidecar.manifest import (
    AgentBuild,
    AgentManifest,
    ManagedTool,
    ToolPolicy,
    ToolsManifest,
)
from clawpod.sidecar.mediation.commands import (
    BeginStream,
    CallModel,
    Command,
    Done,
    Event,
    ExecuteTools,
    Fail,
    ModelFailed,
    ModelReplied,
    PlannedExecution,
    Recall,
    Recalled,
    Remember,
    Respond,
    ToolsDone,
)
from clawpod.sidecar.mediation.engine import MediationEngine
from clawpod.sidecar.model.conversation import ToolOutcome
from clawpod.sidecar.state.continuity import ContinuityStore
from tests.support import responses as rs
from tests.support.builds import http_tool
from tests.support.codecs import codec_of

CHECK = ArgumentCheck()


def tool(name: str, **kwargs: Any) -> ManagedTool:
    service, _, operation = name.partition(".")
    return http_tool(service, operation, "http://127.0.0.1:9", **kwargs)


LOOKUP = tool(
    "desk.lookup",
    schema={
        "type": "object",
        "properties": {"symbol": {"type": "string"}},
        "required": ["symbol"],
    },
    annotations={"readOnlyHint": True},
)
TRADE = tool(
    "desk.trade",
    method="POST",
    schema={
        "type": "object",
        "properties": {"symbol": {"type": "string"}, "qty": {"type": "number"}},
        "required": ["symbol", "qty"],
    },
    annotations={"destructiveHint": True},
)
CANCEL = tool(
    "desk.cancel", method="POST", annotations={"destructiveHint": False, "idempotentHint": True}
)


def agent(
    *tools: ManagedTool,
    agent_id: str = "analyst",
    on_mixed: str = "refuse",
    **policy: int,
) -> AgentBuild:
    tool_list = list(tools) or [LOOKUP, TRADE, CANCEL]
    tool_policy = ToolPolicy(**policy)
    return AgentBuild(
        agent=AgentManifest(
            id=agent_id,
            mode="mediated",
            token_sha256="0" * 64,
            on_mixed=on_mixed,
            policy=tool_policy,
            names={t.presented: t.name for t in tool_list},
        ),
        tools=ToolsManifest(agent=agent_id, tools=tool_list, policy=tool_policy),
    )


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def ok(data: Any = None, latency_ms: float = 1.0) -> ToolOutcome:
    return ToolOutcome(
        envelope={"ok": True, "status": 200, "data": data},
        error_code=None,
        status=200,
        executed=True,
        latency_ms=latency_ms,
    )


MODEL_TIMEOUT_S = 600.0


def engine_for(
    api: str, body: dict[str, Any], agent_build: AgentBuild | None = None
) -> MediationEngine:
    return MediationEngine(
        codec_of(api),
        agent_build or agent(),
        body,
        check=CHECK,
        model_timeout_s=MODEL_TIMEOUT_S,
    )


@dataclass
class Transcript:
    commands: list[Command] = field(default_factory=list)

    def of(self, kind: type) -> list[Any]:
        return [c for c in self.commands if isinstance(c, kind)]

    @property
    def upstream_bodies(self) -> list[dict[str, Any]]:
        return [c.body for c in self.of(CallModel)]

    @property
    def executions(self) -> list[PlannedExecution]:
        return [e for c in self.of(ExecuteTools) for e in c.executions]

    @property
    def last(self) -> Command:
        return self.commands[-1]

    @property
    def response(self) -> Respond:
        assert isinstance(self.last, Respond), self.last
        return self.last

    @property
    def failure(self) -> Fail:
        assert isinstance(self.last, Fail), self.last
        return self.last


def drive(
    engine: MediationEngine,
    replies: Iterable[dict[str, Any] | ModelFailed],
    tools: Callable[[PlannedExecution], ToolOutcome] = lambda e: ok(e.checked.arguments),
    store: ContinuityStore | None = None,
    clock: Clock | None = None,
) -> Transcript:
    """Run the engine to its end, answering each command like the real driver would; tools
    that advance ``clock`` report that time as spent."""
    clock = clock or Clock()
    pending = list(replies)
    transcript = Transcript()
    steps = engine.run()
    command = next(steps)
    while True:
        transcript.commands.append(command)
        if isinstance(command, Respond | Fail):
            steps.close()
            return transcript
        event: Event
        if isinstance(command, BeginStream):
            event = Done()
        elif isinstance(command, Recall):
            event = Recalled(store.candidates(command.keys) if store is not None else {})
        elif isinstance(command, Remember):
            if store is not None:
                store.remember(
                    command.keys,
                    command.messages,
                    agent=engine.agent_id,
                    context=command.context,
                    origin=command.origin,
                    taint_sources=command.taint_sources,
                )
            event = Done()
        elif isinstance(command, CallModel):
            assert pending, "the engine called the model more often than scripted"
            reply = pending.pop(0)
            event = reply if isinstance(reply, ModelFailed) else ModelReplied(reply)
        elif isinstance(command, ExecuteTools):
            before = clock.now
            outcomes = [tools(e) for e in command.executions]
            event = ToolsDone(outcomes, elapsed_s=clock.now - before)
        else:
            raise AssertionError(f"unexpected command {command}")
        command = steps.send(event)


# --- provider reply builders ----------------------------------------------------------------


def oa_calls(*calls: tuple[str, str, Any], content: str | None = None, tokens: int = 10) -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": content,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {
                                "name": name,
                                "arguments": args if isinstance(args, str) else _dump(args),
                            },
                        }
                        for call_id, name, args in calls
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": tokens, "completion_tokens": 2, "total_tokens": tokens + 2},
    }


def oa_text(text: str, tokens: int = 10) -> dict:
    return {
        "id": "chatcmpl-2",
        "object": "chat.completion",
        "created": 2,
        "model": "gpt-4o",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": tokens, "completion_tokens": 3, "total_tokens": tokens + 3},
    }


def an_calls(*calls: tuple[str, str, Any], text: str | None = None, tokens: int = 10) -> dict:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [
        {"type": "tool_use", "id": call_id, "name": name, "input": args}
        for call_id, name, args in calls
    ]
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": content,
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": tokens, "output_tokens": 2},
    }


def an_text(text: str, tokens: int = 10) -> dict:
    return {
        "id": "msg_2",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": tokens, "output_tokens": 3},
    }


def rs_calls(*calls: tuple[str, str, Any], text: str | None = None, tokens: int = 10) -> dict:
    output = [rs.message(text)] if text else []
    output += [rs.call(call_id, name, args) for call_id, name, args in calls]
    return rs.response(*output, response_id="resp_1", input_tokens=tokens, output_tokens=2)


def rs_text(text: str, tokens: int = 10) -> dict:
    return rs.response(rs.message(text), response_id="resp_2", input_tokens=tokens)


def calls(api: str, *items: tuple[str, str, Any], **kwargs: Any) -> dict:
    builder = {"openai": oa_calls, "anthropic": an_calls, "responses": rs_calls}[api]
    return builder(*items, **kwargs)


def text(api: str, value: str, **kwargs: Any) -> dict:
    builder = {"openai": oa_text, "anthropic": an_text, "responses": rs_text}[api]
    return builder(value, **kwargs)


def request(api: str, prompt: str = "What is AAPL at?", **extra: Any) -> dict:
    """A client request; ``messages`` is the conversation in any protocol (Responses names it
    ``input``)."""
    body: dict[str, Any] = {"model": "claude-sonnet-4-5" if api == "anthropic" else "gpt-4o"}
    if api == "anthropic":
        body["max_tokens"] = 1024
    body[messages_field(api)] = extra.pop("messages", [{"role": "user", "content": prompt}])
    body.update(extra)
    return body


def messages_field(api: str) -> str:
    return "input" if api == "responses" else "messages"


def _dump(value: Any) -> str:
    return orjson.dumps(value).decode()
