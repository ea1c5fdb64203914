"""Files a pod or descriptor names stay inside the pod directory tree (SPEC section 10).

A descriptor's skill file is rendered into the agent-facing CONTEXT.md, so reading outside the
tree would hand the agent whatever the path names: the provider keys in `.env`, agent tokens,
system files.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clawpod.compiler.errors import CompileError
from clawpod.compiler.output.build import write_build
from clawpod.compiler.pod import compile_pod
from tests.compiler.conftest import PodDir, descriptor, tool

KEY = "sk-test-do-not-leak-0123456789"
AGENT = """\
  analyst:
    image: example/agent
    x-claw: {agent: {}, tools: [svc]}
"""


@pytest.fixture
def pod_dir(tmp_path: Path) -> PodDir:
    """A pod directory one level below tmp_path, with a key file just outside it."""
    (tmp_path / ".env").write_text(f"OPENAI_API_KEY={KEY}\n")
    (tmp_path / "secret.txt").write_text(KEY)
    root = tmp_path / "pod"
    root.mkdir()
    (root / "build").mkdir()
    (root / "build" / ".env").write_text(f"OPENAI_API_KEY={KEY}\n")
    return PodDir(root)


def pod_with_skill(pod_dir: PodDir, skill: str, descriptor_name: str = "svc.json") -> str:
    (pod_dir.root / descriptor_name).parent.mkdir(parents=True, exist_ok=True)
    pod_dir.descriptor(descriptor_name, descriptor(tool("a"), skill=skill))
    return f"services:\n  svc:\n    image: x\n    x-claw: {{describe: {descriptor_name}}}\n{AGENT}"


@pytest.mark.parametrize(
    ("skill", "descriptor_name", "reason"),
    [
        ("../.env", "svc.json", "leaves the pod directory tree"),
        ("../build/.env", "svc.json", "leaves the pod directory tree"),
        ("../build/.env", "descriptors/svc.json", "env file"),
        ("build/.env", "svc.json", "env file"),
        ("/etc/passwd", "svc.json", "absolute paths are not allowed"),
        ("/dev/zero", "svc.json", "absolute paths are not allowed"),
        ("../../secret.txt", "descriptors/svc.json", "leaves the pod directory tree"),
    ],
)
def test_skill_paths_outside_the_tree_are_refused(
    pod_dir: PodDir, skill: str, descriptor_name: str, reason: str
) -> None:
    error = pod_dir.error(pod_with_skill(pod_dir, skill, descriptor_name))
    assert reason in error.reason
    assert error.pointer == "/skill"
    assert f"{Path(descriptor_name).name}:" in str(error)
    assert f"skill file: cannot read {skill!r}" in str(error)
    assert KEY not in str(error)


def test_the_refused_key_never_reaches_a_build(pod_dir: PodDir, tmp_path: Path) -> None:
    with pytest.raises(CompileError):
        write_build(compile_pod(pod_dir.pod(pod_with_skill(pod_dir, "../.env"))), tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_a_symlink_out_of_the_tree_is_refused(pod_dir: PodDir, tmp_path: Path) -> None:
    (pod_dir.root / "skill.md").symlink_to(tmp_path / "secret.txt")
    error = pod_dir.error(pod_with_skill(pod_dir, "skill.md"))
    assert "symlink" in error.reason and "outside the pod directory tree" in error.reason


def test_a_symlink_to_a_device_is_refused(pod_dir: PodDir) -> None:
    (pod_dir.root / "zero.md").symlink_to("/dev/zero")
    assert (
        "outside the pod directory tree" in pod_dir.error(pod_with_skill(pod_dir, "zero.md")).reason
    )


def test_a_symlink_inside_the_tree_is_followed(pod_dir: PodDir) -> None:
    (pod_dir.root / "skills").mkdir()
    (pod_dir.root / "skills" / "policy.md").write_text("Be careful.")
    (pod_dir.root / "skill.md").symlink_to(pod_dir.root / "skills" / "policy.md")
    pod = pod_dir.compile(pod_with_skill(pod_dir, "skill.md"))
    assert pod.tool_services["svc"].loaded.skill_text == "Be careful."


def test_only_regular_files_are_read(pod_dir: PodDir) -> None:
    os.mkfifo(pod_dir.root / "pipe.md")  # opening it would block the compiler forever
    assert "not a regular file" in pod_dir.error(pod_with_skill(pod_dir, "pipe.md")).reason
    (pod_dir.root / "folder.md").mkdir()
    assert "not a regular file" in pod_dir.error(pod_with_skill(pod_dir, "folder.md")).reason


def test_files_over_one_mebibyte_are_refused(pod_dir: PodDir) -> None:
    (pod_dir.root / "big.md").write_bytes(b"x" * (2 * 1024 * 1024))
    error = pod_dir.error(pod_with_skill(pod_dir, "big.md"))
    assert "larger than 1 MiB" in error.reason
    (pod_dir.root / "big.md").write_bytes(b"x" * (1024 * 1024))
    assert pod_dir.compile(pod_with_skill(pod_dir, "big.md")).agents


@pytest.mark.parametrize(
    ("describe", "reason"),
    [
        ("../svc.json", "leaves the pod directory tree"),
        ("sub/../../svc.json", "leaves the pod directory tree"),
        ("/etc/passwd", "absolute paths are not allowed"),
        ("build/.env", "env file"),
    ],
)
def test_describe_paths_outside_the_tree_are_refused(
    pod_dir: PodDir, tmp_path: Path, describe: str, reason: str
) -> None:
    (tmp_path / "svc.json").write_text('{"version": 2, "tools": []}')
    (pod_dir.root / "sub").mkdir()
    error = pod_dir.error(
        f"services:\n  svc:\n    image: x\n    x-claw: {{describe: {describe}}}\n"
    )
    assert reason in error.reason
    assert error.service == "svc"
    assert error.pointer == "/services/svc/x-claw/describe"
    assert str(error).startswith(f"{pod_dir.root / 'pod.yml'}:4: service 'svc': ")


def test_a_large_descriptor_is_refused(pod_dir: PodDir) -> None:
    pod_dir.descriptor("svc.json", " " * (1024 * 1024 + 1) + "{}")
    error = pod_dir.error("services:\n  svc:\n    image: x\n    x-claw: {describe: svc.json}\n")
    assert "larger than 1 MiB" in error.reason


def test_root_widens_the_tree_to_a_parent_directory(tmp_path: Path) -> None:
    shared = tmp_path / "descriptors"
    shared.mkdir()
    (shared / "svc.json").write_text(
        '{"version": 2, "skill": "skill.md", "tools": [{"name": "a", "description": "A.",'
        ' "inputSchema": {"type": "object"}, "http": {"method": "GET", "path": "/a"}}]}'
    )
    (shared / "skill.md").write_text("Shared skill.")
    pods = PodDir(tmp_path / "pods" / "desk")
    pods.root.mkdir(parents=True)
    services = (
        "services:\n  svc:\n    image: x\n    x-claw: {describe: ../../descriptors/svc.json}\n"
    )
    reason = pods.error(services + AGENT).reason
    # The refusal names the rule and the setting that changes it.
    assert "leaves the pod directory tree" in reason and "x-claw.root" in reason
    pod = pods.compile("x-claw: {root: ../..}\n" + services + AGENT)
    assert pod.tool_services["svc"].loaded.skill_text == "Shared skill."


def test_root_must_contain_the_pod_file(pod_dir: PodDir, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    error = pod_dir.error("x-claw: {root: ../elsewhere}\n" + pod_with_skill(pod_dir, "s.md"))
    assert error.pointer == "/x-claw/root"
    assert "contains the pod file" in error.reason
