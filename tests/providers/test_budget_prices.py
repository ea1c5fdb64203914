"""USD and token budgets an agent cannot talk its way past (SPEC §14, docs/providers.md): a
model nobody prices is refused under a USD budget instead of costing $0, the ``-pro`` variants
cost their list price, and a request without an output cap is held at the most its model may
write while it runs. A second agent's requests succeed throughout."""

from __future__ import annotations

import asyncio

import openai
import orjson
import pytest

from clawpod.sidecar.manifest import Governance, Price, RouteTarget
from clawpod.sidecar.model import usage
from clawpod.sidecar.model.usage import BUILT_IN_PRICES, price_of
from tests.providers.conftest import PodMaker, pool_providers
from tests.support.upstream import Reply, openai_completion

ASK = [{"role": "user", "content": "hi"}]
AGENTS = ("analyst", "bystander")
MILLION = 1_000_000


@pytest.mark.parametrize("model", ["gpt-4", "gpt-4-0613", "gpt-4-turbo", "gpt-3.5-turbo"])
async def test_a_million_tokens_of_an_older_model_spend_a_usd_budget(
    make_pod: PodMaker, model: str
) -> None:
    """Before: these models had no price, so 5 requests of 2M tokens each cost $0 against
    usd-per-day: 1."""
    governance = Governance(usd_budgets={"analyst": 1.0})
    pod = await make_pod(routes={}, governance=governance, agent_ids=AGENTS)
    big = openai_completion(model=model, prompt_tokens=2 * MILLION, completion_tokens=10)
    pod.upstreams.primary.always("openai", Reply.json(big))
    attacker, bystander = pod.openai(), pod.openai("bystander")
    served = 0
    for _ in range(5):
        try:
            await attacker.chat.completions.create(model=model, messages=ASK, max_tokens=10)  # type: ignore[arg-type]
            served += 1
        except openai.RateLimitError as refused:
            assert refused.code == "budget_exhausted"
        await bystander.chat.completions.create(model=model, messages=ASK)  # type: ignore[arg-type]
    assert served == 1
    assert (await pod.audit())[0]["cost_usd"] >= 1.0


async def test_a_model_nobody_prices_is_refused_under_a_usd_budget(make_pod: PodMaker) -> None:
    governance = Governance(usd_budgets={"analyst": 1.0})
    pod = await make_pod(routes={}, governance=governance, agent_ids=AGENTS)
    pod.upstreams.primary.always("openai", Reply.json(openai_completion()))
    with pytest.raises(openai.BadRequestError) as refused:
        await pod.openai().chat.completions.create(model="gpt-oss-120b", messages=ASK)  # type: ignore[arg-type]
    assert refused.value.code == "model_unpriced"
    assert "gpt-oss-120b" in refused.value.message and "'default'" in refused.value.message
    assert refused.value.response.headers["x-should-retry"] == "false"
    # An agent without a USD budget may use it; nothing of the refused request went upstream.
    await pod.openai("bystander").chat.completions.create(model="gpt-oss-120b", messages=ASK)  # type: ignore[arg-type]
    assert len(pod.upstreams.primary.requests_to("openai")) == 1


async def test_a_fallback_nobody_prices_is_refused_too(make_pod: PodMaker) -> None:
    """Any target of a route may serve the request: each must have a price."""
    governance = Governance(usd_budgets={"analyst": 1.0})
    east = RouteTarget(provider="azure-east", model="east-deployment")
    routes = {"gpt-4o*": [RouteTarget(provider="openai"), east]}
    pod = await make_pod(governance=governance, routes=routes)
    pod.upstreams.primary.always("openai", Reply.json(openai_completion()))
    with pytest.raises(openai.BadRequestError) as refused:
        await pod.openai().chat.completions.create(model="gpt-4o", messages=ASK)  # type: ignore[arg-type]
    assert "east-deployment" in refused.value.message and "azure-east" in refused.value.message


async def test_a_default_price_prices_every_other_model(make_pod: PodMaker, upstreams) -> None:  # type: ignore[no-untyped-def]
    providers = pool_providers(upstreams)
    default = {"default": Price(input=3.0, cached_input=3.0, output=9.0)}
    providers["openai"] = providers["openai"].model_copy(update={"prices": default})
    governance = Governance(usd_budgets={"analyst": 1.0})
    pod = await make_pod(routes={}, providers=providers, governance=governance)
    usage = openai_completion(prompt_tokens=100_000, completion_tokens=0)
    pod.upstreams.primary.always("openai", Reply.json(usage))
    await pod.openai().chat.completions.create(model="gpt-oss-120b", messages=ASK)  # type: ignore[arg-type]
    assert (await pod.audit())[0]["cost_usd"] == pytest.approx(0.3)
    # The table still prices what it knows before the default.
    assert price_of("gpt-4o", default) == BUILT_IN_PRICES["gpt-4o*"]


@pytest.mark.parametrize(
    ("model", "list_price"),
    [("o1-pro", (150.0, 600.0)), ("o3-pro", (20.0, 80.0)), ("gpt-5-pro", (15.0, 120.0))],
)
def test_pro_variants_cost_their_list_price(model: str, list_price: tuple[float, float]) -> None:
    price = price_of(model, {})
    assert price is not None
    assert (price.input, price.output) == list_price
    assert price_of(f"{model}-2025-06-10", {}) == price  # dated ids too


async def test_parallel_requests_without_an_output_cap_cannot_spend_past_the_budget(
    make_pod: PodMaker,
) -> None:
    """Each request without a cap was held at its own size (a few tokens), so ten were
    admitted against 1,000 tokens and spent 8,000; now each is held at the most its model may
    write (gpt-4o: 16,384) while it runs."""
    pod = await make_pod(
        routes={}, governance=Governance(budgets={"analyst": 1_000}), agent_ids=AGENTS
    )
    gate = asyncio.Event()
    completion = orjson.dumps(openai_completion(prompt_tokens=500, completion_tokens=300))
    pod.upstreams.primary.always("openai", Reply(chunks=[gate, completion]))
    client = pod.openai()
    tasks = [
        asyncio.create_task(client.chat.completions.create(model="gpt-4o", messages=ASK))  # type: ignore[arg-type]
        for _ in range(10)
    ]
    for _ in range(300):  # the refused ones answer at once; give the rest 3 s to arrive
        if sum(task.done() for task in tasks) >= 9:
            break
        await asyncio.sleep(0.01)
    bystander = asyncio.create_task(
        pod.openai("bystander").chat.completions.create(model="gpt-4o", messages=ASK)  # type: ignore[arg-type]
    )
    gate.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    await bystander
    records = await pod.audit(10)
    spent = sum(r["usage"]["input_tokens"] + r["usage"]["output_tokens"] for r in records)
    assert spent <= 1_000  # before the fix: 8,000
    assert sum(isinstance(r, openai.RateLimitError) for r in results) == 9


@pytest.mark.parametrize(
    "model", ["gpt-4", "gpt-4-0613", "gpt-4-1106-preview", "gpt-3.5-turbo", "chatgpt-4o-latest"]
)
def test_the_older_models_are_priced(model: str) -> None:
    assert price_of(model, {}) is not None


def test_the_most_output_of_the_common_models() -> None:
    max_output_of = usage.max_output_of
    assert max_output_of("gpt-4o-2024-11-20") == 16_384
    assert max_output_of("gpt-5-mini") == 128_000
    assert max_output_of("o3-pro") == 100_000
    assert max_output_of("gpt-4.1-nano") == 32_768
    assert max_output_of("llama-3.1-8b") is None
