"""Pod files and descriptors written to hurt: alias bombs, smuggled path syntax, credentials in
URLs, metadata addresses, reserved arguments (SPEC section 10), and a pod with no agent."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from clawpod.cli.clawc import main
from clawpod.compiler.errors import CompileError
from tests.compiler.conftest import TOOL_SERVICES, PodDir, descriptor, tool

AGENT = """\
  analyst:
    image: example/agent
    x-claw: {agent: {}, tools: [svc]}
"""


def alias_bomb(levels: int = 9) -> str:
    """Each level lists the previous one nine times: 9**levels nodes from a few hundred bytes."""
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    for level in range(1, levels):
        previous = f"*a{level - 1}"
        lines.append(f"a{level}: &a{level} [{','.join([previous] * 9)}]")
    return "\n".join(lines) + "\n"


def test_a_512_byte_alias_bomb_in_a_pod_file_fails_with_a_clear_error(pod_dir: PodDir) -> None:
    text = "x-bomb:\n" + "".join(f"  {line}\n" for line in alias_bomb().splitlines())
    text += "services:\n  svc: {image: x}\n"
    assert len(text.encode()) <= 512
    error = pod_dir.error(text)
    assert "aliases expand to more than 10,000" in error.reason
    assert error.file is not None and str(error.file).endswith("pod.yml")


def test_an_alias_bomb_in_a_yaml_descriptor_fails_too(pod_dir: PodDir) -> None:
    text = alias_bomb() + "version: 2\ntools: []\n"
    pod_dir.descriptor("bomb.yaml", text)
    error = pod_dir.error("services:\n  svc:\n    image: x\n    x-claw: {describe: bomb.yaml}\n")
    assert "aliases expand" in error.reason
    assert str(error.file).endswith("bomb.yaml")


def test_ordinary_aliases_still_work(pod_dir: PodDir) -> None:
    pod = pod_dir.compile(
        "x-common: &common {image: example/agent}\n"
        "services:\n" + TOOL_SERVICES + "  analyst:\n    <<: *common\n"
        "    x-claw: {agent: {}, tools: [svc]}\n"
        "  helper:\n    <<: *common\n"
    )
    assert [a.id for a in pod.agents] == ["analyst"]


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/items/{id} HTTP/1.1", "spaces are not allowed"),
        ("/items\r\nX-Injected: 1", "control character"),
        ("/items\n", "control character"),
        ("/items/\x00", "control character"),
        ("/items?mode=all", "'?' is not allowed"),
        ("/items#top", "'#' is not allowed"),
        ("/items/{}", "malformed {placeholder}"),
        ("/items/{id", "unbalanced braces"),
        ("/items/id}", "unbalanced braces"),
        ("/items/{a b}", "malformed {placeholder}"),
        ("/items/{{id}}", "malformed {placeholder}"),
        ("/items/../admin", "'..' segments are not allowed"),
        ("/items/%zz", "'%' not followed by two hex digits"),
        ("/items/{id}/{id}", "appears twice"),
        ("/items/\u00e9", "not allowed in a URL path"),
    ],
)
def test_bad_path_templates_are_compile_errors(pod_dir: PodDir, path: str, reason: str) -> None:
    schema = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
    pod_dir.descriptor("svc.json", descriptor(tool("a", path=path, inputSchema=schema)))
    error = pod_dir.error("services:\n  svc:\n    image: x\n    x-claw: {describe: svc.json}\n")
    assert error.pointer == "/tools/0/http/path"
    assert reason in error.reason
    assert "invalid path template" in error.reason


@pytest.mark.parametrize(
    "path",
    ["/items/{id}", "/files/{id}.json", "/a;v=1/@b:c/{id}", "/x/%20y/{id}", "/{claw_id}/{id}"],
)
def test_valid_path_templates_compile(pod_dir: PodDir, path: str) -> None:
    schema = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
    pod_dir.descriptor("svc.json", descriptor(tool("a", path=path, inputSchema=schema)))
    pod = pod_dir.compile(
        "services:\n  svc:\n    image: x\n    x-claw: {describe: svc.json}\n" + AGENT
    )
    assert pod.agents[0].tools[0][1].path == path


def test_claw_id_cannot_be_required_either(pod_dir: PodDir) -> None:
    schema = {"type": "object", "properties": {}, "required": ["claw_id"]}
    pod_dir.descriptor("svc.json", descriptor(tool("a", inputSchema=schema)))
    error = pod_dir.error("services:\n  svc:\n    image: x\n    x-claw: {describe: svc.json}\n")
    assert error.pointer == "/tools/0/inputSchema/required"
    assert "reserved" in error.reason


def test_claw_id_property_is_refused_inside_a_body_key_tool(pod_dir: PodDir) -> None:
    schema = {"type": "object", "properties": {"claw_id": {"type": "string"}}}
    pod_dir.descriptor(
        "svc.json", descriptor(tool("a", "POST", inputSchema=schema, http={"body_key": "trade"}))
    )
    error = pod_dir.error("services:\n  svc:\n    image: x\n    x-claw: {describe: svc.json}\n")
    assert error.pointer == "/tools/0/inputSchema/properties/claw_id"


def test_credentials_in_a_service_url_are_an_error(pod_dir: PodDir) -> None:
    error = pod_dir.error(
        "services:\n  svc:\n    image: x\n"
        "    x-claw: {describe: svc.json, url: 'http://user:secret@svc:4000'}\n" + AGENT
    )
    assert error.pointer == "/services/svc/x-claw/url"
    assert "must not carry credentials" in error.reason
    assert "secret" not in str(error)
    only_user = pod_dir.error(
        "services:\n  svc:\n    image: x\n"
        "    x-claw: {describe: svc.json, url: 'http://token@svc:4000'}\n" + AGENT
    )
    assert "must not carry credentials" in only_user.reason


@pytest.mark.parametrize(
    "url", ["http://169.254.169.254/latest", "http://169.254.1.2:8080", "http://[fd00:ec2::254]/"]
)
def test_a_metadata_address_compiles_with_a_warning(pod_dir: PodDir, url: str) -> None:
    pod = pod_dir.compile(
        f"services:\n  svc:\n    image: x\n    x-claw: {{describe: svc.json, url: '{url}'}}\n"
        + AGENT
    )
    assert pod.tool_services["svc"].base_url == url.rstrip("/")
    assert len(pod.warnings) == 1
    assert "metadata address" in pod.warnings[0]
    assert "service 'svc'" in pod.warnings[0] and "/services/svc/x-claw/url" in pod.warnings[0]


def test_an_ordinary_url_gives_no_warning(pod_dir: PodDir) -> None:
    pod = pod_dir.compile(
        "services:\n  svc:\n    image: x\n"
        "    x-claw: {describe: svc.json, url: 'http://10.0.0.5:4000'}\n" + AGENT
    )
    assert pod.warnings == []


def test_clawc_prints_warnings_on_stderr(pod_dir: PodDir, tmp_path: Path) -> None:
    pod = pod_dir.pod(
        "services:\n  svc:\n    image: x\n"
        "    x-claw: {describe: svc.json, url: 'http://169.254.169.254'}\n" + AGENT
    )
    for command in (["compile", str(pod), "-o", str(tmp_path / "out")], ["validate", str(pod)]):
        out, err = io.StringIO(), io.StringIO()
        assert main(command, stdout=out, stderr=err) == 0
        assert "clawc: warning: " in err.getvalue()
        assert "169.254.169.254" in err.getvalue()
        assert "clawc: warning" not in out.getvalue()


def test_a_pod_without_agents_compiles_with_a_warning(pod_dir: PodDir, tmp_path: Path) -> None:
    pod_file = pod_dir.pod("services:\n" + TOOL_SERVICES)
    out, err = io.StringIO(), io.StringIO()
    assert main(["compile", str(pod_file), "-o", str(tmp_path / "out")], out, err) == 0
    assert "clawc: warning: " in err.getvalue()
    assert "no agent found" in err.getvalue()


def test_bad_input_still_raises_compile_error_type(pod_dir: PodDir) -> None:
    with pytest.raises(CompileError):
        pod_dir.compile("services: []\n")
