"""SPEC §9 at compile time: principals, tool rules (CEL checked against input schemas),
approvals and budgets; every bad input is an error naming the pod file and line."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from clawpod.cli.inspect import inspect_command
from clawpod.compiler.output.build import write_build
from clawpod.sidecar.manifest import Rate, load_build
from clawpod.sidecar.model.rules import (
    activation,
    as_declared,
    compile_condition,
    evaluate,
    exact_string_comparisons,
    sample_of,
)
from tests.compiler.conftest import PodDir, descriptor, tool

TRADE = {
    "type": "object",
    "properties": {
        "symbol": {"type": "string"},
        "side": {"enum": ["buy", "sell"]},
        "quantity": {"type": "number"},
    },
    "required": ["symbol", "side", "quantity"],
}


def desk_pod(extra_claw: str = "", trader_extra: str = "", analyst_env: str = "") -> str:
    return f"""\
x-claw:
  principals:
    desk-readonly: {{service: desk, env: DESK_RO_TOKEN}}
    desk-trader: {{service: desk, env: DESK_RW_TOKEN}}
{extra_claw}
services:
  desk:
    image: example/desk
    x-claw: {{describe: desk.json}}
  news:
    image: example/news
    x-claw: {{describe: news.json}}
  analyst:
    image: example/agent
{analyst_env}
    x-claw:
      agent: {{}}
      tools:
        - {{service: desk, allow: [get_quote], principal: desk-readonly}}
  trader:
    image: example/agent
    x-claw:
      agent: {{}}
      tools:
        - {{service: desk, allow: [get_quote, execute_trade], principal: desk-trader}}
{trader_extra}
"""


@pytest.fixture
def desk(tmp_path: Path) -> PodDir:
    directory = PodDir(tmp_path)
    quote_schema = {"type": "object", "properties": {"symbol": {"type": "string"}}}
    directory.descriptor(
        "desk.json",
        descriptor(
            tool("get_quote", inputSchema=quote_schema, annotations={"readOnlyHint": True}),
            tool("execute_trade", "POST", inputSchema=TRADE),
            auth={"type": "bearer", "env": "DESK_TOKEN"},
        ),
    )
    directory.descriptor("news.json", descriptor(tool("search")))
    return directory


def test_principals_resolve_into_each_grants_auth(desk: PodDir) -> None:
    pod = desk.compile(desk_pod())
    auths = {
        (agent.id, f"{service.name}.{compiled.name}"): service.auth
        for agent in pod.agents
        for service, compiled in agent.tools
    }
    assert auths["analyst", "desk.get_quote"].env == "DESK_RO_TOKEN"
    assert auths["trader", "desk.get_quote"].env == "DESK_RW_TOKEN"
    assert auths["trader", "desk.execute_trade"].principal == "desk-trader"
    assert {"DESK_RO_TOKEN", "DESK_RW_TOKEN"} <= set(pod.credential_envs)


def test_manifest_holds_variable_names_and_inspect_shows_the_principal(desk: PodDir) -> None:
    pod = desk.compile(desk_pod())
    out = desk.root / "out"
    write_build(pod, out, sidecar_image="example/sidecar")
    build = load_build(out)
    analyst = build.agents["analyst"].tools.tools[0].execution.auth
    assert (analyst.env, analyst.principal) == ("DESK_RO_TOKEN", "desk-readonly")
    shown = io.StringIO()
    inspect_command(out, shown)
    assert "bearer $DESK_RO_TOKEN (principal desk-readonly)" in shown.getvalue()
    assert "bearer $DESK_RW_TOKEN (principal desk-trader)" in shown.getvalue()
    assert "DESK_RW_TOKEN" in (out / "compose.yml").read_text()  # passed to the sidecar


@pytest.mark.parametrize(
    ("change", "needle", "message"),
    [
        (("principal: desk-readonly}", "principal: nobody}"), "principal: nobody", "unknown"),
        (("desk-readonly: {service: desk", "desk-readonly: {service: news"), "", "no credential"),
        (("desk-readonly: {service: desk", "desk-readonly: {service: gone"), "", "no tool service"),
    ],
)
def test_bad_principals_are_located_errors(
    desk: PodDir, change: tuple[str, str], needle: str, message: str
) -> None:
    text = desk_pod().replace(*change)
    error = desk.error(text)
    assert message in str(error)
    assert "pod.yml:" in str(error)
    if needle:
        assert error.line == desk.line_of(needle)


def test_a_principal_of_another_service_is_refused(desk: PodDir) -> None:
    desk.descriptor(
        "news.json", descriptor(tool("search"), auth={"type": "bearer", "env": "NEWS_TOKEN"})
    )
    text = desk_pod("    news-key: {service: news, env: NEWS_KEY_2}").replace(
        "principal: desk-readonly}", "principal: news-key}"
    )
    error = desk.error(text)
    assert "credential of service 'news', not of 'desk'" in str(error)
    assert error.line == desk.line_of("principal: news-key}")


def test_an_agent_setting_a_principal_variable_is_starved(desk: PodDir) -> None:
    error = desk.error(desk_pod(analyst_env="    environment: {DESK_RW_TOKEN: stolen}"))
    assert "principal 'desk-trader'" in str(error) and "must not hold credentials" in str(error)


RULES = """\
  tool-rules:
    - {tool: desk.execute_trade, when: 'args.quantity > 100', effect: deny, reason: too big}
    - {tool: "desk.*", when: 'args.symbol == "GME"', effect: confirm}
    - {tool: desk.get_quote, rate: 5/minute}
  approvals: {require: [desk.execute_trade], timeout-ms: 60000}
  budgets: {analyst: {tokens-per-day: 1000}, "*": {tokens-per-day: 50000}}
"""


def test_rules_approvals_and_budgets_reach_the_manifest(desk: PodDir) -> None:
    pod = desk.compile(desk_pod(RULES))
    governance = pod.governance
    assert governance is not None
    trader = governance.rules["trader"]
    assert [r.effect for r in trader] == ["deny", "confirm", "allow"]
    assert trader[0].source == f"pod.yml:{desk.line_of('too big')}"
    assert trader[2].rate == Rate(count=5, per="minute")
    assert governance.approvals.require == ["desk.execute_trade"]
    assert governance.budgets == {"analyst": 1000, "*": 50000}


@pytest.mark.parametrize(
    ("when", "message"),
    [
        ("args.quantity >", "Syntax error"),
        ("args.quantity > 'many'", "No such overload"),
        ("args.qty > 100", "no field 'qty'"),
        ("args.symbol + 'x'", "not a boolean"),
        ("args.quantity * 2 > 10", "does not coerce"),  # number is double: write 2.0
        ("nobody == 'x'", "Undefined variable"),
    ],
)
def test_bad_conditions_are_compile_errors_with_file_and_line(
    desk: PodDir, when: str, message: str
) -> None:
    rules = f'  tool-rules:\n    - {{tool: desk.execute_trade, when: "{when}", effect: deny}}\n'
    error = desk.error(desk_pod(rules))
    assert message in str(error)
    assert "desk.execute_trade" in str(error)
    assert f"pod.yml:{desk.line_of('effect: deny')}:" in str(error)


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ("  tool-rules:\n    - {tool: desk.nothing, effect: deny}\n", "matches no tool"),
        ("  tool-rules:\n    - {tool: desk.get_quote, rate: 5/day}\n", "N/minute"),
        ("  tool-rules:\n    - {tool: desk.get_quote, effect: maybe}\n", "effect"),
        ("  approvals: {require: [desk.nothing]}\n", "matches no tool"),
        ("  approvals: {require: sometimes}\n", "require"),
        ("  budgets: {ghost: {tokens-per-day: 5}}\n", "not an agent"),
        ("  budgets: {analyst: {tokens-per-day: 0}}\n", "tokens-per-day"),
    ],
)
def test_bad_governance_settings_are_located(desk: PodDir, rules: str, message: str) -> None:
    error = desk.error(desk_pod(rules))
    assert message in str(error)
    assert "pod.yml:" in str(error)
    assert error.line is not None and error.line > 3


def test_an_agent_rule_is_checked_against_its_own_grants(desk: PodDir) -> None:
    own = "      tool-rules:\n        - {tool: news.search, effect: deny}\n"
    error = desk.error(desk_pod(trader_extra=own))
    assert "granted to this agent" in str(error)
    assert error.service == "trader"


def test_a_pod_without_governance_keeps_its_manifest_unchanged(desk: PodDir) -> None:
    pod = desk.compile(desk_pod())
    assert pod.governance is None


@pytest.mark.parametrize(
    ("when", "warned"),
    [
        ('args.symbol == "GME"', ["args.symbol"]),
        ('"GME" != args.symbol', ["args.symbol"]),
        ('args.symbol in ["GME", "AMC"]', ["args.symbol"]),
        ('args.symbol.startsWith("GM")', ["args.symbol"]),
        ('args.symbol.lowerAscii().startsWith("gm")', []),
        ('args.symbol.trim().upperAscii() == "GME"', []),
        ('args.side == "buy"', []),  # an enum: the schema already refuses "BUY"
        ("args.quantity > 100.0", []),
    ],
)
def test_an_exact_comparison_of_a_free_form_string_is_a_warning(
    desk: PodDir, when: str, warned: list[str]
) -> None:
    rules = f"  tool-rules:\n    - {{tool: desk.execute_trade, when: '{when}', effect: confirm}}\n"
    pod = desk.compile(desk_pod(rules))
    mine = [w for w in pod.warnings if "compared exactly" in w]  # the desk has others
    assert len(mine) == len(warned)
    for field, warning in zip(warned, mine, strict=True):
        assert f"pod.yml:{desk.line_of('effect: confirm')}:" in warning
        assert f"{field} is a free-form string compared exactly" in warning
        assert f"{field}.upperAscii()" in warning


def test_rule_conditions_follow_refs_as_the_schema_normaliser_does() -> None:
    """One $ref walker: an escaped name (``~1`` is ``/``) or an index into a list resolves for
    the conditions' schema readers as it does when the compiler inlines the schema."""
    schema = {
        "type": "object",
        "properties": {"symbol": {"$ref": "#/$defs/a~1b"}, "price": {"$ref": "#/$defs/list/0"}},
        "$defs": {"a/b": {"type": "string"}, "list": [{"type": "number"}]},
    }
    assert exact_string_comparisons('args.symbol == "GME"', schema) == ["args.symbol"]
    assert sample_of(schema) == {"symbol": "x", "price": 1.5}
    assert as_declared(schema, {"price": 2}) == {"price": 2.0}


def test_case_aware_string_functions_work_at_run_time() -> None:
    condition = compile_condition('args.symbol.trim().lowerAscii() == "nvda"')
    for symbol, expected in (("NVDA", True), (" nvda ", True), ("Nvda", True), ("AMD", False)):
        variables = activation("a", "desk.execute_trade", {}, {"symbol": symbol})
        assert evaluate(condition, variables) is expected


OAUTH_PRINCIPALS = """\
    desk-oauth:
      service: desk
      auth: {type: oauth2-client-credentials, token-url: "http://idp:8080/token",
             client-id-env: DESK_CLIENT_ID, client-secret-env: DESK_CLIENT_SECRET,
             scopes: [quotes.read, trades.write], audience: "https://desk"}
    desk-for-user:
      service: desk
      auth: {type: token-exchange, token-url: "http://idp:8080/token",
             client-id-env: DESK_CLIENT_ID, client-secret-env: DESK_CLIENT_SECRET,
             scopes: [trades.write]}
"""


def oauth_pod() -> str:
    return (
        desk_pod(OAUTH_PRINCIPALS)
        .replace("principal: desk-readonly}", "principal: desk-oauth}")
        .replace("principal: desk-trader}", "principal: desk-for-user}")
    )


def test_oauth_principals_reach_the_build_and_inspect_names_them(desk: PodDir) -> None:
    pod = desk.compile(oauth_pod())
    out = desk.root / "out"
    write_build(pod, out, sidecar_image="example/sidecar")
    build = load_build(out)
    analyst = build.agents["analyst"].tools.tools[0].execution.auth
    assert analyst.type == "oauth2-client-credentials" and analyst.principal == "desk-oauth"
    assert analyst.scopes == ("quotes.read", "trades.write") and analyst.audience == "https://desk"
    trader = build.agents["trader"].tools.tools[0].execution.auth
    assert trader.type == "token-exchange"
    shown = io.StringIO()
    inspect_command(out, shown)
    text = shown.getvalue()
    assert (
        "OAuth client credentials (scopes quotes.read trades.write) (principal desk-oauth)" in text
    )
    assert "on behalf of the end user (scopes trades.write) (principal desk-for-user)" in text
    compose = (out / "compose.yml").read_text()
    assert "DESK_CLIENT_ID" in compose and "DESK_CLIENT_SECRET" in compose  # for the sidecar


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            (
                "client-secret-env: DESK_CLIENT_SECRET,\n             scopes: [quotes",
                "scopes: [quotes",
            ),
            "needs client-secret-env",
        ),
        (
            (
                'token-url: "http://idp:8080/token",\n             client-id-env: DESK_CLIENT_ID, '
                "client-secret-env: DESK_CLIENT_SECRET,\n             scopes: [trades",
                'token-url: "idp", client-id-env: DESK_CLIENT_ID, client-secret-env: '
                "DESK_CLIENT_SECRET,\n             scopes: [trades",
            ),
            "principal 'desk-for-user': token-url 'idp' must be an absolute http(s) URL",
        ),
        (
            (
                "      service: desk\n      auth: {type: oauth2",
                "      service: desk\n      env: X\n      auth: {type: oauth2",
            ),
            "either env (a credential) or auth (OAuth)",
        ),
    ],
)
def test_bad_oauth_principals_are_named(
    desk: PodDir, change: tuple[str, str], message: str
) -> None:
    text = oauth_pod()
    assert change[0] in text
    error = desk.error(text.replace(*change))
    assert message in str(error) and "pod.yml:" in str(error)


def test_an_agent_holding_an_oauth_client_secret_is_starved(desk: PodDir) -> None:
    text = oauth_pod().replace(
        "  analyst:\n    image: example/agent\n",
        "  analyst:\n    image: example/agent\n    environment: {DESK_CLIENT_SECRET: stolen}\n",
    )
    error = desk.error(text)
    assert "DESK_CLIENT_SECRET" in str(error) and "must not hold credentials" in str(error)
