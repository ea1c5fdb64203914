"""A minimal agent runner: one question to the model through the sidecar, then the answer.

It knows nothing about tools or credentials: OPENAI_BASE_URL points at the sidecar and
OPENAI_API_KEY is this agent's token (both from agents/<id>.env). In mediated mode the sidecar
offers the granted tools, runs them and returns the final answer.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from openai import OpenAI

QUESTION = "Summarise my positions and buying power, and the latest news on my holdings."
CONTEXT = Path("/claw/CONTEXT.md")


def main() -> int:
    client = OpenAI()  # reads OPENAI_BASE_URL and OPENAI_API_KEY
    messages = []
    if CONTEXT.is_file():
        messages.append({"role": "system", "content": CONTEXT.read_text(encoding="utf-8")})
    messages.append({"role": "user", "content": os.environ.get("CLAW_QUESTION", QUESTION)})
    reply = client.chat.completions.create(
        model=os.environ.get("CLAW_MODEL", "gpt-4o-mini"), messages=messages
    )
    print(reply.choices[0].message.content or "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
