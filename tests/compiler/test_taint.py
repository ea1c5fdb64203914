"""SPEC §17 at compile time: untrusted-output tools, the pod's taint mode and its default, the
egress allow-lists, what `clawc inspect` shows, and every bad input a located error."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from clawpod.cli.inspect import inspect_command
from clawpod.compiler.output.build import write_build
from clawpod.sidecar.manifest import load_build
from tests.compiler.conftest import PodDir, descriptor, tool

SYMBOL = {"type": "object", "properties": {"symbol": {"type": "string"}}}


def pod_text(pod_claw: str = "", desk_claw: str = "", agent_claw: str = "") -> str:
    return f"""\
x-claw:
  pod: desk
{pod_claw}
services:
  desk:
    image: example/desk
    x-claw: {{describe: desk.json{desk_claw}}}
  news:
    image: example/news
    x-claw: {{describe: news.json}}
  analyst:
    image: example/agent
    x-claw: {{agent: {{}}, tools: [desk, news]{agent_claw}}}
"""


@pytest.fixture
def desk(tmp_path: Path) -> PodDir:
    directory = PodDir(tmp_path)
    directory.descriptor(
        "desk.json",
        descriptor(
            tool("get_quote", inputSchema=SYMBOL, annotations={"readOnlyHint": True}),
            tool("execute_trade", "POST", annotations={"destructiveHint": True}),
        ),
    )
    directory.descriptor(
        "news.json",
        descriptor(
            tool("headlines", annotations={"readOnlyHint": True, "openWorldHint": True}),
            tool("filing", **{"x-claw": {"untrusted-output": True}}),
            tool("archive", annotations={"openWorldHint": False}),
        ),
    )
    return directory


def build_of(desk: PodDir, text: str):  # type: ignore[no-untyped-def]
    out = desk.root / "out"
    write_build(desk.compile(text), out, sidecar_image="example/sidecar")
    return out, load_build(out)


def test_untrusted_tools_reach_the_manifest_and_the_pod_defaults_to_confirm(desk: PodDir) -> None:
    out, build = build_of(desk, pod_text())
    untrusted = {t.name: t.untrusted for t in build.agents["analyst"].tools.tools}
    assert untrusted == {
        "desk.get_quote": False,
        "desk.execute_trade": False,
        "news.headlines": True,
        "news.filing": True,
        "news.archive": False,
    }
    assert build.config.taint is not None and build.config.taint.mode == "confirm"
    shown = io.StringIO()
    inspect_command(out, shown)
    text = shown.getvalue()
    assert "taint: confirm" in text and "egress-allow: none" in text
    assert "read-only, untrusted output" in text


def test_a_pod_without_untrusted_tools_has_no_taint(desk: PodDir) -> None:
    text = pod_text().replace("tools: [desk, news]", "tools: [desk]")
    _, build = build_of(desk, text)
    assert build.config.taint is None
    assert '"taint"' not in (desk.root / "out" / "sidecar.json").read_text()


@pytest.mark.parametrize("mode", ["confirm", "withdraw", "off"])
def test_the_mode_and_allow_lists_are_compiled(desk: PodDir, mode: str) -> None:
    text = pod_text(
        f"  taint: {mode}\n  egress-allow: [Intranet.Example, '*.corp.example']",
        desk_claw=", egress-allow: [api.desk.example]",
    )
    out, build = build_of(desk, text)
    taint = build.config.taint
    assert taint is not None
    assert (taint.mode, taint.egress_allow) == (mode, ["intranet.example", "*.corp.example"])
    assert taint.service_egress_allow == {"desk": ["api.desk.example"]}
    shown = io.StringIO()
    inspect_command(out, shown)
    assert f"taint: {mode}" in shown.getvalue()
    assert "api.desk.example (desk)" in shown.getvalue()


@pytest.mark.parametrize(
    ("text", "needle", "message"),
    [
        (pod_text("  taint: sometimes"), "taint:", "'confirm', 'withdraw' or 'off'"),
        (pod_text("  egress-allow: ['https://x.example/']"), "egress-allow", "pattern"),
        (pod_text("  egress-allow: ['*']"), "egress-allow", "pattern"),
        (pod_text(agent_claw=", egress-allow: [x.example]"), "agent:", "not an agent"),
    ],
)
def test_bad_taint_settings_are_located_errors(
    desk: PodDir, text: str, needle: str, message: str
) -> None:
    error = desk.error(text)
    assert message in str(error)
    assert error.line == desk.line_of(needle)


def test_a_bad_untrusted_output_flag_is_a_descriptor_error(desk: PodDir) -> None:
    desk.descriptor("news.json", descriptor(tool("filing", **{"x-claw": {"untrusted": True}})))
    error = desk.error(pod_text())
    assert "unknown field 'untrusted'" in str(error) and "/tools/0/x-claw" in str(error)


def test_rules_see_the_request_taint_and_are_checked_against_it(desk: PodDir) -> None:
    good = "  tool-rules:\n    - {tool: desk.execute_trade, when: 'request.tainted', effect: deny}"
    assert desk.compile(pod_text(good)).governance is not None
    sources = '"news.filing" in request.taint_sources && request.taint_sources.size() > 0'
    assert desk.compile(
        pod_text(f"  tool-rules:\n    - {{tool: desk.execute_trade, when: '{sources}'}}")
    )
    bad = "  tool-rules:\n    - {tool: desk.execute_trade, when: 'request.nope', effect: deny}"
    assert "no field 'nope'" in str(desk.error(pod_text(bad)))


def test_untrusted_output_does_not_change_the_definition_pin(desk: PodDir) -> None:
    """The pin is what the service states (§11.2): the operator's x-claw is not part of it."""
    _, marked = build_of(desk, pod_text())
    desk.descriptor(
        "news.json",
        descriptor(
            tool("headlines", annotations={"readOnlyHint": True, "openWorldHint": True}),
            tool("filing"),
            tool("archive", annotations={"openWorldHint": False}),
        ),
    )
    _, plain = build_of(desk, pod_text())
    pins = [{t.name: t.pin for t in b.agents["analyst"].tools.tools} for b in (marked, plain)]
    assert pins[0] == pins[1]
