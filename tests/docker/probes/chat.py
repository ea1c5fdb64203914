"""Run inside the agent container: one chat completion through the sidecar with the openai SDK.

argv[1]: model; argv[2]: JSON list of messages; argv[3] (optional): "stream" to stream it. The
SDK takes its base URL and key from the agent's environment (OPENAI_BASE_URL, OPENAI_API_KEY),
exactly as an unmodified runner would. Prints {"content", "finish_reason", "usage"} as JSON.
"""

import json
import sys

from openai import OpenAI

client = OpenAI(max_retries=0, timeout=60)
model, messages = sys.argv[1], json.loads(sys.argv[2])
if sys.argv[3:] == ["stream"]:
    stream = client.chat.completions.create(
        model=model, messages=messages, stream=True, stream_options={"include_usage": True}
    )
    content, finish_reason, usage = [], None, None
    for chunk in stream:
        for choice in chunk.choices:
            content.append(choice.delta.content or "")
            finish_reason = choice.finish_reason or finish_reason
        usage = chunk.usage or usage
    result = {"content": "".join(content), "finish_reason": finish_reason, "usage": usage}
else:
    response = client.chat.completions.create(model=model, messages=messages)
    choice = response.choices[0]
    result = {
        "content": choice.message.content,
        "finish_reason": choice.finish_reason,
        "usage": response.usage,
    }
if result["usage"] is not None:
    result["usage"] = result["usage"].model_dump()
print(json.dumps(result))
