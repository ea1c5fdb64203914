"""The imported descriptor as a file a person reviews: YAML with comments saying where each
tool came from and what was left out (or plain JSON), and re-import as a diff.

Re-importing over an existing file writes it only when nothing but comments would change, or
with ``--overwrite``; otherwise the diff is shown and the file is kept, since it may hold
edits (tools trimmed, descriptions sharpened) that a fresh import would undo.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .operations import Imported, ImportedTool

_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def descriptor_data(imported: Imported) -> dict[str, Any]:
    document = imported.document
    description = f"{document.title or 'An HTTP API'}, imported from an OpenAPI document."
    return {
        "version": 2,
        "description": description,
        "auth": imported.auth,
        "tools": [tool.entry for tool in imported.tools],
    }


def render(imported: Imported, json_output: bool) -> str:
    data = descriptor_data(imported)
    if json_output:
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    head = {k: v for k, v in data.items() if k != "tools"}
    lines = [*_header(imported), _dump(head).rstrip("\n"), "tools:"]
    if not imported.tools:
        lines[-1] = "tools: []"
    for tool in imported.tools:
        lines += _tool_lines(tool)
    return "\n".join(lines) + "\n"


def summary_lines(imported: Imported) -> list[str]:
    """What the import left out and what the pod must say, for stderr (and JSON output)."""
    lines = [f"skipped {s.operation.label}: {s.reason}" for s in imported.skipped]
    lines += imported.auth_notes
    if imported.service_url:
        lines.append(
            f"the document's server is {imported.service_url}: give the service "
            f"x-claw.url: {imported.service_url} in the pod file unless it runs in the pod"
        )
    return lines


def _comment(text: str, limit: int = 300) -> str:
    """Document text made safe for one comment line (no line break can end the comment)."""
    text = _CONTROL.sub(" ", text).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _header(imported: Imported) -> list[str]:
    document = imported.document
    kind = "Swagger" if document.swagger else "OpenAPI"
    lines = [
        f"# Imported by `clawc import openapi` from {_comment(document.file.name)}",
        f"# ({kind} {_comment(document.version)}: {_comment(document.title) or 'untitled'}).",
        "# Review each tool before granting it: descriptions and schemas are the document's.",
        "# Re-running the import shows a diff against this file (--overwrite replaces it).",
    ]
    if imported.service_url:
        lines += [
            f"# Service URL (servers[0]): {_comment(imported.service_url)}",
            "#   the pod file's x-claw.url of the service, unless the service runs in the pod.",
        ]
    if imported.base_path:
        lines.append(f"# Paths include the server's base path {_comment(imported.base_path)}.")
    for note in imported.auth_notes:
        lines.append(f"# Auth: {_comment(note)}")
    if imported.skipped:
        lines.append(f"# Skipped operations ({len(imported.skipped)}):")
        lines += [
            f"#   {_comment(s.operation.label)}: {_comment(s.reason)}" for s in imported.skipped
        ]
    return lines


def _tool_lines(tool: ImportedTool) -> list[str]:
    lines = [f"  # {_comment(tool.operation.label)}"]
    lines += [f"  #   {_comment(note)}" for note in tool.notes]
    body = _dump([tool.entry]).rstrip("\n").split("\n")
    return lines + ["  " + line for line in body]


class _Dumper(yaml.SafeDumper):
    """Multi-line text (a description) as a ``|`` block, as a person would write it."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def _dump(data: Any) -> str:
    return yaml.dump(
        data,
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        width=100,
        default_flow_style=False,
    )


@dataclass
class WriteResult:
    written: bool
    diff: str  # unified diff of the existing file against the import ('' when equal)
    same_meaning: bool  # only comments (or nothing) differ


def write_descriptor(text: str, target: Path, overwrite: bool) -> WriteResult:
    """Write ``text`` to ``target`` unless ``target`` holds a different descriptor and
    ``overwrite`` is not given; return what happened and the diff."""
    if not target.exists():
        target.write_text(text)
        return WriteResult(True, "", True)
    current = target.read_text()
    if current == text:
        return WriteResult(False, "", True)
    diff = "".join(
        difflib.unified_diff(
            current.splitlines(keepends=True),
            text.splitlines(keepends=True),
            fromfile=f"{target} (current)",
            tofile=f"{target} (imported)",
        )
    )
    same = _meaning(current) == _meaning(text)
    if same or overwrite:
        target.write_text(text)
        return WriteResult(True, diff, same)
    return WriteResult(False, diff, False)


def _meaning(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None
