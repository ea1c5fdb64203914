"""Turn a compiled pod into the files of a build directory (docs/contract.md §3)."""

from __future__ import annotations

import json
import os
import re
import secrets
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import jinja2
import yaml

from ...sidecar.manifest import (
    AdminListen,
    AgentManifest,
    EdgeConfig,
    Effect,
    Execution,
    Listen,
    ManagedTool,
    SidecarConfig,
    dump_json,
    token_sha256,
    write_digest,
)
from ..agents import AgentPlan
from ..errors import CompileError
from ..pod import CompiledPod
from ..pod_file.reserved import (
    ADMIN_HOST,
    ADMIN_PORT,
    AGENT_TOKEN_ENV,
    MCP_URL,
    agent_environment,
)
from ..pod_file.spec import EdgeSpec
from ..services.descriptors import CompiledTool
from ..services.tool_names import canonical_name, present
from ..services.tool_services import ToolService
from .compose import STATE_DIR, generate_compose
from .kubernetes import kubernetes_files
from .runner_configs import codex_config, langchain_config, mcp_config
from .swarm import swarm_files

TOKEN_PREFIX = "claw_"
TOKEN_PATTERN = re.compile(r"^claw_[A-Za-z0-9_-]{32,}$")
_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("clawpod.compiler.output", "templates"),
    autoescape=False,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
    undefined=jinja2.StrictUndefined,
)


def version() -> str:
    try:
        return metadata.version("clawpod")
    except metadata.PackageNotFoundError:  # running from a source tree that is not installed
        return "0.0.0"


def source_root() -> Path | None:
    """The repository that holds the sidecar's Dockerfile, when clawc runs from a source tree."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "sidecar").is_dir() else None


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def read_token(env_file: Path) -> str | None:
    """The agent token of an earlier build, if that file holds a well-formed one."""
    try:
        text = env_file.read_text(encoding="utf-8")
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition("=")
        if name.strip() == AGENT_TOKEN_ENV and TOKEN_PATTERN.match(value.strip()):
            return value.strip()
    return None


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """libyaml's emitter when available; values shared through YAML anchors are written out in
    full, so the generated compose has no anchors to puzzle over."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


_PRESENTED = "@@CLAW_PRESENTED@@"  # cannot occur in a canonical name ('@' is not allowed there)
_TOOLS = "@@CLAW_TOOLS@@"


@dataclass
class _ToolEntry:
    """A granted tool rendered once, however many agents are granted it.

    Its tools.json entry and CONTEXT.md section differ between agents only by the presented
    name, so both are kept as text split around that name.
    """

    canonical: str
    json_parts: tuple[str, str]
    context_parts: tuple[str, str]

    def json_text(self, presented: str) -> str:
        # Presented names are [a-zA-Z0-9_-]: as JSON strings they need no escaping.
        return f'{self.json_parts[0]}"{presented}"{self.json_parts[1]}'

    def context_text(self, presented: str) -> str:
        return self.context_parts[0] + presented + self.context_parts[1]


def _tool_entry(service: ToolService, tool: CompiledTool) -> _ToolEntry:
    canonical = canonical_name(service.name, tool.name)
    model = ManagedTool(
        name=canonical,
        presented="placeholder",
        description=tool.description,
        inputSchema=tool.input_schema,
        annotations=tool.annotations,
        execution=Execution(
            transport=tool.transport,
            service=service.name,
            base_url=service.base_url,
            method=tool.method,  # type: ignore[arg-type]
            path=tool.path,
            body=tool.body,
            body_key=tool.body_key,
            body_arg=tool.body_arg,
            query=tool.query,
            headers=tool.headers,
            tool=tool.name if tool.transport == "mcp" else None,
            ttl_ms=tool.ttl_ms,
            auth=service.auth,
        ),
        pin=tool.pin,
        untrusted_output=tool.untrusted_output or None,
        long_running=tool.long_running or None,
    )
    data = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    data["presented"] = _PRESENTED
    # Indented as an item of the "tools" list in tools.json (two levels deep).
    text = dump_json(data).rstrip("\n").replace("\n", "\n    ")
    before, after = text.split(json.dumps(_PRESENTED), 1)
    block = _ENV.get_template("tool.md.j2").render(
        presented=_PRESENTED, tool=_context_tool(tool, model.effect)
    )
    context_before, context_after = block.split(_PRESENTED, 1)
    return _ToolEntry(canonical, (before, after), (context_before, context_after))


def _describe_type(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return "one of " + ", ".join(str(v) for v in schema["enum"])
    if "const" in schema:
        return f"always {schema['const']}"
    kind = schema.get("type")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array" and isinstance(schema.get("items"), dict):
        return f"array of {_describe_type(schema['items'])}"
    return kind or "any"


# What CONTEXT.md tells the agent about each effect.
_EFFECT_TEXT = {
    Effect.READ_ONLY: "read-only",
    Effect.IDEMPOTENT: "changes data; repeating it is harmless",
    Effect.ADDITIVE: "changes data",
    Effect.DESTRUCTIVE: "changes data; destructive, not undoable",
}


def _context_tool(tool: CompiledTool, effect: Effect) -> dict[str, Any]:
    schema = tool.input_schema
    required = set(schema.get("required", []))
    arguments = [
        {
            "name": name,
            "type": _describe_type(prop) if isinstance(prop, dict) else "any",
            "required": name in required,
            "description": (prop.get("description") or "").strip()
            if isinstance(prop, dict)
            else "",
        }
        for name, prop in (schema.get("properties") or {}).items()
    ]
    return {
        "title": tool.annotations.get("title"),
        "description": tool.description.strip(),
        "effect": _EFFECT_TEXT[effect],
        "arguments": arguments,
    }


def _render_context(
    pod: CompiledPod, agent: AgentPlan, entries: list[_ToolEntry], names: dict[str, str]
) -> str:
    tools = [entry.context_text(names[entry.canonical]) for entry in entries]
    granted_services = list(dict.fromkeys(service.name for service, _ in agent.tools))
    skills = [
        {"service": name, "text": pod.tool_services[name].loaded.skill_text}
        for name in granted_services
        if pod.tool_services[name].loaded.skill_text
    ]
    text = _ENV.get_template("CONTEXT.md.j2").render(
        agent_id=agent.id,
        pod=pod.name,
        mode=agent.mode,
        tools=tools,
        skills=skills,
        policy=agent.policy,
    )
    for name in granted_services:
        service = pod.tool_services[name]
        if service.base_url in text:
            raise CompileError(
                f"the description or skill reveals the service URL {service.base_url}; "
                "agents must not see service URLs",
                file=service.loaded.source,
            )
    return text


def _env_file(agent_id: str, token: str) -> str:
    entries = "".join(f"{name}={value}\n" for name, value in agent_environment(token).items())
    return f"# Token of agent '{agent_id}' (secret): --rotate-tokens replaces it.\n" + entries


def _tools_json(agent: AgentPlan, entries: list[_ToolEntry], names: dict[str, str]) -> str:
    """tools.json, byte for byte what dump_json(ToolsManifest) gives, from pre-rendered entries."""
    if not entries:
        return dump_json(
            {"version": 1, "agent": agent.id, "tools": [], "policy": agent.policy.model_dump()}
        )
    skeleton = dump_json(
        {"version": 1, "agent": agent.id, "tools": [_TOOLS], "policy": agent.policy.model_dump()}
    )
    tools = ",\n    ".join(entry.json_text(names[entry.canonical]) for entry in entries)
    return skeleton.replace(json.dumps(_TOOLS), tools, 1)


def _names_json(names: dict[str, str]) -> str:
    """The "names" map as it appears (one level deep) in agent.json."""
    return dump_json(names).rstrip("\n").replace("\n", "\n  ")


def _agent_json(manifest: AgentManifest, names_text: str) -> str:
    """agent.json, byte for byte what dump_json(manifest) gives, reusing the names block."""
    skeleton = dump_json(manifest.model_copy(update={"names": {}}))
    head, _, tail = skeleton.rpartition('"names": {}')
    return f'{head}"names": {names_text}{tail}'


def _compose_text(document: dict[str, Any], pod: CompiledPod) -> str:
    header = (
        f"# Generated by clawc {version()} from {pod.file.name} (pod {pod.name}); do not edit.\n"
        "# Run from this directory: docker compose up\n"
    )
    return header + _dump(document)


def render_build(
    pod: CompiledPod,
    out: Path,
    tokens: dict[str, str],
    *,
    sidecar_image: str | None = None,
) -> dict[str, str]:
    """Every file of the build except digest.json, keyed by path relative to OUT."""
    files: dict[str, str] = {}
    entries: dict[tuple[str, str, str], _ToolEntry] = {}
    presented: dict[tuple[str, ...], dict[str, str]] = {}
    names_json: dict[tuple[str, ...], str] = {}
    for agent in pod.agents:
        agent_entries = []
        for service, tool in agent.tools:
            key = (service.name, tool.name, service.principal or "")
            if key not in entries:
                entries[key] = _tool_entry(service, tool)
            agent_entries.append(entries[key])
        grant_key = tuple(e.canonical for e in agent_entries)
        if grant_key not in presented:  # agents with the same grants share their names
            presented[grant_key] = present(grant_key)
        names = presented[grant_key]
        token = tokens[agent.id]
        manifest = AgentManifest(
            id=agent.id,
            mode=agent.mode,
            token_sha256=token_sha256(token),
            on_mixed=pod.claw.on_mixed,
            tool_injection=agent.tool_injection,
            policy=agent.policy,
            names={names[e.canonical]: e.canonical for e in agent_entries},
            deferred=agent.deferred or None,
        )
        directory = f"context/{agent.id}"
        files[f"{directory}/tools.json"] = _tools_json(agent, agent_entries, names)
        if grant_key not in names_json:
            names_json[grant_key] = _names_json(manifest.names)
        files[f"{directory}/agent.json"] = _agent_json(manifest, names_json[grant_key])
        files[f"{directory}/CONTEXT.md"] = _render_context(pod, agent, agent_entries, names)
        files[f"{directory}/mcp.json"] = dump_json(mcp_config(MCP_URL))
        files[f"agents/{agent.id}.env"] = _env_file(agent.id, token)
        files[f"agents/{agent.id}.mcp.json"] = dump_json(mcp_config(MCP_URL, token))
        files[f"agents/{agent.id}.codex.toml"] = codex_config(agent.id, MCP_URL, token)
        files[f"agents/{agent.id}.langchain.json"] = dump_json(langchain_config(MCP_URL, token))
    extra: dict[str, Any] = {}
    if pod.claw.max_body_bytes:
        extra["max_body_bytes"] = pod.claw.max_body_bytes
    if pod.claw.upstream_timeout_ms:
        extra["upstream_timeout_ms"] = pod.claw.upstream_timeout_ms
    if pod.claw.edge is not None:
        extra.update(_edge_settings(pod.claw.edge))
    if pod.governance is not None:
        extra["governance"] = pod.governance
    if pod.taint is not None:
        extra["taint"] = pod.taint
    if pod.shared_limits is not None:
        extra["shared_limits"] = pod.shared_limits
    if pod.identity is not None:
        extra["identity"] = pod.identity
    if pod.end_users is not None:
        extra["end_users"] = pod.end_users
    config = SidecarConfig(
        pod=pod.name,
        providers=pod.providers,
        routes=pod.routes,
        agents=[agent.id for agent in pod.agents],
        listen=Listen(host="0.0.0.0", port=8080),
        admin_listen=AdminListen(host=ADMIN_HOST, port=ADMIN_PORT),
        state_dir=STATE_DIR,
        **extra,
    )
    files["sidecar.json"] = dump_json(config)
    files["compose.yml"] = _compose_text(compose_document(pod, out, sidecar_image), pod)
    return files


def compose_document(pod: CompiledPod, out: Path, sidecar_image: str | None) -> dict[str, Any]:
    root = source_root()
    if sidecar_image is None and root is None:
        raise CompileError(
            "clawc is not running from a clawpod source tree; pass --sidecar-image IMAGE"
        )
    return generate_compose(
        pod, out, source_root=root, sidecar_image=sidecar_image, version=version()
    )


def _dump(data: Any) -> str:
    return yaml.dump(
        data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100,
        allow_unicode=True,
    )  # fmt: skip


def _check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise CompileError("output path exists and is not a directory", file=out)
    if out.is_dir() and any(out.iterdir()) and not (out / "digest.json").exists():
        raise CompileError(
            "refusing to write into a non-empty directory that is not a clawc build", file=out
        )


def agent_tokens(pod: CompiledPod, out: Path, rotate: bool) -> dict[str, str]:
    tokens = {}
    for agent in pod.agents:
        existing = None if rotate else read_token(out / "agents" / f"{agent.id}.env")
        tokens[agent.id] = existing or new_token()
    return tokens


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, 0o600)  # an existing file keeps its old mode through O_CREAT


def _remove_stale(out: Path, files: dict[str, str]) -> None:
    """Delete what an earlier compile wrote and this one does not (agents that are gone)."""
    stale = [p for p in (out / "context").rglob("*") if p.is_file()]
    stale += [p for p in (out / "agents").iterdir() if p.is_file()]
    for path in stale:
        if path.relative_to(out).as_posix() not in files:
            path.unlink()
    for directory in sorted((out / "context").glob("*/"), reverse=True):
        if directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()


def write_build(
    pod: CompiledPod,
    out: Path,
    *,
    rotate_tokens: bool = False,
    sidecar_image: str | None = None,
    target: str = "compose",
) -> list[str]:
    """Compile ``pod`` into ``out`` for ``target`` (SPEC §13.2); earlier context files and
    stale agents are removed. Returns what the target cannot enforce, one warning a line."""
    _check_out(out)
    tokens = agent_tokens(pod, out, rotate_tokens)
    files = render_build(pod, out, tokens, sidecar_image=sidecar_image)
    if target != "compose":
        del files["compose.yml"]
    out.mkdir(parents=True, exist_ok=True)
    (out / "agents").mkdir(mode=0o700, exist_ok=True)
    _remove_stale(out, files)
    for relative, text in files.items():
        path = out / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if relative.startswith("agents/"):
            _write_private(path, text)
        else:
            path.write_text(text, encoding="utf-8")
    write_digest(out)
    if target == "compose":
        return []
    # The digest is part of what the target ships: render from the files as written.
    files["digest.json"] = (out / "digest.json").read_text(encoding="utf-8")
    document = compose_document(pod, out, sidecar_image)
    render = kubernetes_files if target == "kubernetes" else swarm_files
    target_files, warnings = render(pod, document, files, version(), _dump)
    for stale in (out / "k8s").glob("*.yaml"):
        stale.unlink()
    for relative, text in target_files.items():
        path = out / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return warnings


def _edge_settings(edge: EdgeSpec) -> dict[str, Any]:
    """``x-claw.edge`` as ``sidecar.json`` holds it: the connection cap at the top (where it
    was first), the other bounds in ``edge``; unset ones keep their defaults."""
    settings = edge.model_dump(exclude_none=True)
    extra: dict[str, Any] = {}
    if "max_connections" in settings:
        extra["max_connections"] = settings.pop("max_connections")
    if settings:
        extra["edge"] = EdgeConfig(**settings)
    return extra
