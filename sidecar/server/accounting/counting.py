"""Token counting of a mediated agent (``count_tokens``, ``input_tokens``): the model will see
the managed tools too, so they are counted as well, or runners' context estimates run low."""

from __future__ import annotations

from typing import Any

from ...codecs.base import Codec
from ...manifest import AgentBuild
from ...mediation.tool_offer import present_tools
from ...model.conversation import CodecError, ToolSpec


def with_managed_tools(codec: Codec, agent: AgentBuild, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with the agent's tools after the runner's own, named as a mediated request of
    the same body would name them; unchanged when it is not a request the codec can read."""
    try:
        runner_names = codec.parse_request(body).runner_tool_names
    except (CodecError, AttributeError, TypeError, KeyError, ValueError):
        return body  # the provider explains what is wrong with it
    managed = present_tools(list(agent.tools.tools), runner_names)
    definitions = [
        codec.tool_definition(ToolSpec(name, tool.description, tool.input_schema))
        for name, tool in managed.items()
    ]
    return {**body, "tools": [*(body.get("tools") or []), *definitions]}
