"""Run inside the agent container: one chat completion through the sidecar with the openai SDK.

argv[1]: model; argv[2]: JSON list of messages. The SDK takes its base URL and key from the
agent's environment (OPENAI_BASE_URL, OPENAI_API_KEY), exactly as an unmodified runner would.
Prints {"content", "finish_reason", "usage"} as JSON.
"""

import json
import sys

from openai import OpenAI

client = OpenAI(max_retries=0, timeout=60)
response = client.chat.completions.create(model=sys.argv[1], messages=json.loads(sys.argv[2]))
choice = response.choices[0]
print(
    json.dumps(
        {
            "content": choice.message.content,
            "finish_reason": choice.finish_reason,
            "usage": response.usage.model_dump() if response.usage else None,
        }
    )
)
