"""Run inside an agent container: one chat completion through the sidecar with the openai SDK,
answered or refused.

argv[1]: model; argv[2]: the user's message. The SDK takes its base URL and key from the
environment, as an unmodified runner would. Prints {"status", "code", "should_retry", "usage"}
as JSON: the error's code and the x-should-retry header when refused, the usage when answered.
"""

import json
import sys

from openai import APIStatusError, OpenAI

client = OpenAI(max_retries=0, timeout=60)
try:
    response = client.chat.completions.create(
        model=sys.argv[1], messages=[{"role": "user", "content": sys.argv[2]}]
    )
except APIStatusError as exc:
    error = exc.body if isinstance(exc.body, dict) else {}
    result = {
        "status": exc.status_code,
        "code": error.get("code"),
        "should_retry": exc.response.headers.get("x-should-retry"),
        "usage": None,
    }
else:
    usage = response.usage.model_dump() if response.usage else None
    result = {"status": 200, "code": None, "should_retry": None, "usage": usage}
print(json.dumps(result))
