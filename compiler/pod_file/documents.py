"""YAML/JSON loading that remembers where each value came from, so errors (ours and pydantic's)
can cite lines."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..errors import CompileError, pointer

try:  # the C loader is much faster on big pod files; fall back when libyaml is absent
    _Loader: type[yaml.SafeLoader] = yaml.CSafeLoader  # type: ignore[assignment]
except AttributeError:  # pragma: no cover
    _Loader = yaml.SafeLoader

Path_ = tuple[str | int, ...]
TOO_DEEP = "the document is nested too deeply"
MAX_C_LOADER_DEPTH = 500
MAX_ALIAS_NODES = 10_000
_FLOW_BRACKETS = re.compile(r"[\[\]{}]")


@dataclass
class Lines:
    """1-based line numbers of the values of a loaded document, keyed by their path.

    ``unindexed`` is JSON text read on the fast path: it is indexed (parsed again, as YAML)
    only when an error first asks for a line.
    """

    by_path: dict[Path_, int] = field(default_factory=dict)
    unindexed: str | None = None

    def line(self, path: Path_) -> int | None:
        """The line of ``path``, or of its nearest ancestor that has one."""
        if self.unindexed is not None:
            text, self.unindexed = self.unindexed, None
            self._index_json(text)
        for end in range(len(path), -1, -1):
            found = self.by_path.get(tuple(path[:end]))
            if found is not None:
                return found
        return None

    def _index_json(self, text: str) -> None:
        loader = _loader_for(text)(text)
        try:
            node = loader.get_single_node()
            if node is not None:
                _index(node, (), self)
        except (yaml.YAMLError, RecursionError):
            self.by_path.clear()  # JSON that YAML 1.1 cannot read: errors go without a line
        finally:
            loader.dispose()


def _check_alias_expansion(node: yaml.Node, source: Path | str) -> None:
    """Aliases let a few hundred bytes stand for billions of nodes ("billion laughs"); every
    later walk expands them, so the expansion is bounded before anything walks the tree."""
    sizes: dict[int, int] = {}

    def expanded(current: yaml.Node) -> int:
        known = sizes.get(id(current))
        if known is not None:
            return known
        children: list[yaml.Node] = []
        if isinstance(current, yaml.MappingNode):
            children = [part for pair in current.value for part in pair]
        elif isinstance(current, yaml.SequenceNode):
            children = current.value
        size = 1 + sum(expanded(child) for child in children)
        sizes[id(current)] = size
        return size

    added = expanded(node) - len(sizes)
    if added > MAX_ALIAS_NODES:
        raise CompileError(
            f"YAML aliases expand to more than {MAX_ALIAS_NODES:,} extra nodes "
            "(an alias bomb?); write the repeated values out or use fewer aliases",
            file=source,
        )


def _check_duplicates(
    node: yaml.Node, source: Path | str, done: set[int], inside: frozenset[int] = frozenset()
) -> None:
    """YAML loaders silently keep the last of two equal keys; compose refuses them, so do we.
    An alias to a node that contains it would make the document infinite: refused too."""
    if id(node) in inside:
        line = node.start_mark.line + 1
        raise CompileError("recursive YAML alias (a node contains itself)", file=source, line=line)
    if id(node) in done:  # aliases share nodes
        return
    done.add(id(node))
    inside = inside | {id(node)}
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value != "<<":
                if key_node.value in seen:
                    line = key_node.start_mark.line + 1
                    raise CompileError(f"duplicate key '{key_node.value}'", file=source, line=line)
                seen.add(key_node.value)
            _check_duplicates(value_node, source, done, inside)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _check_duplicates(item, source, done, inside)


def _index(node: yaml.Node, path: Path_, lines: Lines) -> None:
    lines.by_path.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                child = (*path, key_node.value)
                lines.by_path[child] = key_node.start_mark.line + 1
                _index(value_node, child, lines)
    elif isinstance(node, yaml.SequenceNode):
        for position, item in enumerate(node.value):
            _index(item, (*path, position), lines)


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CompileError(f"{what} not found", file=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CompileError(f"cannot read {what}: {exc}", file=path) from None


def _loader_for(text: str) -> type[yaml.SafeLoader]:
    """libyaml's composer recurses in C and crashes the process on very deep flow nesting
    ("[[[[..."); such text goes to the pure-Python loader, which raises RecursionError."""
    if text.count("[") + text.count("{") <= MAX_C_LOADER_DEPTH:
        return _Loader
    depth = deepest = 0
    for bracket in _FLOW_BRACKETS.finditer(text):  # quotes ignored: only picks a loader
        depth += 1 if bracket.group() in "[{" else -1
        deepest = max(deepest, depth)
    return yaml.SafeLoader if deepest > MAX_C_LOADER_DEPTH else _Loader


def parse_yaml(text: str, source: Path | str) -> tuple[Any, Lines]:
    """Parse one YAML document, keeping line numbers."""
    loader = _loader_for(text)(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            _check_duplicates(node, source, set())
            if "&" in text:  # no anchor, no alias: skip the walk on big plain pod files
                _check_alias_expansion(node, source)
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        reason = f"invalid YAML: {exc.problem or exc.context}"
        raise CompileError(reason, file=source, line=line) from None
    except yaml.YAMLError as exc:
        raise CompileError(f"invalid YAML: {exc}", file=source) from None
    except RecursionError:
        raise CompileError(TOO_DEEP, file=source) from None
    finally:
        loader.dispose()
    lines = Lines()
    if node is not None:
        _index(node, (), lines)
    return data, lines


def parse_document(text: str, source: Path | str, *, json_first: bool) -> tuple[Any, Lines]:
    """Parse JSON (fast path, no line numbers) or YAML (with line numbers)."""
    if json_first:
        try:
            return json.loads(text), Lines(unindexed=text)
        except json.JSONDecodeError as exc:
            raise CompileError(f"invalid JSON: {exc.msg}", file=source, line=exc.lineno) from None
        except RecursionError:
            raise CompileError(TOO_DEEP, file=source) from None
    return parse_yaml(text, source)


def load_file(path: Path, what: str) -> tuple[Any, Lines]:
    """Load a ``.json`` file as JSON and anything else as YAML."""
    return parse_document(_read_text(path, what), path, json_first=path.suffix.lower() == ".json")


def _pydantic_reason(error: dict[str, Any]) -> str:
    if error["type"] == "extra_forbidden":
        return f"unknown field '{error['loc'][-1]}'"
    if error["type"] == "missing":
        return f"missing required field '{error['loc'][-1]}'"
    return str(error["msg"]).removeprefix("Value error, ")


def validation_error(
    exc: ValidationError, file: str, lines: Lines, prefix: tuple = ()
) -> CompileError:
    """The first pydantic error as a located :class:`CompileError`."""
    first = exc.errors()[0]
    loc = (*prefix, *first["loc"])
    if first["type"] == "missing":
        loc = loc[:-1]
    return CompileError(
        _pydantic_reason(first), file=file, pointer=pointer(*loc), line=lines.line(loc)
    )
