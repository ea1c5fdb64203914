"""What deferred tools cost and save (SPEC §23): a pod granting 500 generated tools, every tool
injected against deferred behind ``claw_tool_search``.

    .venv/bin/python -m bench.tool_search                # 200 questions per arm
    .venv/bin/python -m bench.tool_search --requests 50

Each arm compiles the catalog pod (``tests/support/bigpod.py``) and runs the real sidecar as its
own process (``python -m clawpod.sidecar``, production settings: JSON logs, hash-chained audit).
The scripted model (``tests/support/catalog_model.py``) and the tool service run in this process
on 127.0.0.1. One client asks the held-out questions in turn (concurrency 1). Reported per arm:
the sidecar's CPU per mediated request (user + system of its process tree, from /proc, over the
measured requests after a warm-up), its model calls per request, the tool definitions' tokens
per model call, and how many answers ran the right tool. ``--json FILE`` writes the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench.processes import cpu_seconds, free_port, process_tree, start_server
from bench.run import PROVIDER_KEYS, REPO, sidecar_command
from clawpod.compiler.output.build import read_token, write_build
from clawpod.compiler.pod import compile_pod
from clawpod.sidecar.audit.log import AUDIT_KEY_ENV
from tests.support.bigpod import held_out_questions, write_catalog_pod
from tests.support.catalog_model import CatalogModel
from tests.support.services import ToolService
from tests.support.upstream import StubUpstream

WARM_UP = 20
# Arm -> (the pod's defer-tools-over, services of 20 tools granted). The first is the
# reference: a grant of 20 tools, all injected, asked the questions about its own service.
ARMS = {"20 tools": (None, 1), "all injected": (None, 25), "deferred": (50, 25)}


async def measure_arm(
    workdir: Path,
    arm: tuple[int | None, int],
    requests: int,
    questions: list[tuple[str, str]],
) -> dict[str, Any]:
    defer_over, services = arm
    upstream = await StubUpstream().start()
    service = await ToolService().start()
    model = CatalogModel()
    upstream.respond("openai", model)
    pod = write_catalog_pod(workdir, upstream.openai_url, service.url, defer_over, services)
    build = workdir / "out"
    write_build(compile_pod(pod), build)
    token = read_token(build / "agents" / "agent.env")
    port = free_port()
    argv = [
        part.replace("{port}", str(port))
        for part in sidecar_command(build, workdir / "state", free_port())
    ]
    sidecar = start_server(
        "sidecar",
        argv,
        port,
        workdir,
        env={**PROVIDER_KEYS, AUDIT_KEY_ENV: secrets.token_hex(32)},
        cwd=REPO,
    )
    try:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as client:
            return await _ask_all(client, sidecar, model, upstream, service, requests, questions)
    finally:
        sidecar.stop()
        await service.close()
        await upstream.close()


async def _ask_all(
    client: aiohttp.ClientSession,
    sidecar: Any,
    model: CatalogModel,
    upstream: StubUpstream,
    service: ToolService,
    requests: int,
    questions: list[tuple[str, str]],
) -> dict[str, Any]:
    url = sidecar.url("/v1/chat/completions")

    async def ask(number: int) -> bool:
        question, tool = questions[number % len(questions)]
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": question}]}
        async with client.post(url, data=orjson.dumps(body)) as response:
            await response.read()
            assert response.status == 200, response.status
        path = service.requests[-1].path if service.requests else ""
        upstream.received.clear()  # 500 tool definitions a request: keep memory flat
        service.requests.clear()
        domain, name = tool.split(".")
        return path == f"/{domain}/{name.split('_')[0]}"

    for number in range(WARM_UP):
        await ask(number)
    pids = process_tree(sidecar.pid)
    model.tool_tokens.clear()
    before = sum(cpu_seconds(pid) for pid in pids)
    right = sum([await ask(number) for number in range(requests)])
    spent = sum(cpu_seconds(pid) for pid in pids) - before
    return {
        "requests": requests,
        "cpu_ms_per_request": round(spent / requests * 1000, 3),
        "model_calls_per_request": round(len(model.tool_tokens) / requests, 2),
        "tool_tokens_per_model_call": round(sum(model.tool_tokens) / len(model.tool_tokens)),
        "right_tool": right,
    }


async def run(requests: int) -> dict[str, Any]:
    questions = held_out_questions(50)
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="claw-bench-tool-search-") as tmp:
        for arm, settings in ARMS.items():
            directory = Path(tmp) / arm.replace(" ", "-")
            asked = questions if settings[1] > 1 else _of_first_service(questions)
            figures[arm] = await measure_arm(directory, settings, requests, asked)
    every, deferred = figures["all injected"], figures["deferred"]
    fall = 1 - deferred["tool_tokens_per_model_call"] / every["tool_tokens_per_model_call"]
    figures["tool_tokens_fall"] = round(fall, 4)
    return figures


def _of_first_service(questions: list[tuple[str, str]]) -> list[tuple[str, str]]:
    first = questions[0][1].split(".")[0]
    return [(q, tool) for q, tool in held_out_questions(500) if tool.startswith(first + ".")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200, help="measured requests per arm")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    args = parser.parse_args(argv)
    figures = asyncio.run(run(args.requests))
    for arm in ARMS:
        row = figures[arm]
        print(
            f"{arm:>13}: {row['cpu_ms_per_request']:.3f} ms CPU per request, "
            f"{row['model_calls_per_request']} model calls, "
            f"{row['tool_tokens_per_model_call']} tool tokens per call, "
            f"right tool {row['right_tool']}/{row['requests']}"
        )
    print(f"tool tokens per model call fall by {figures['tool_tokens_fall']:.1%}")
    if args.json:
        args.json.write_text(orjson.dumps(figures, option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
