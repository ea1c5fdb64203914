"""Session-wide credential sweep: tests register the credential values they hand the sidecar
and the text the sidecar produced; at the end of the session every collected text, every log
record and every file under pytest's temporary directory is searched for those values.

The plugin hooks live in ``tests/conftest.py``. Registered automatically: every provider key
and tool credential in the environment given to :func:`tests.support.sidecar.start_sidecar`.
Collected automatically: log records of the whole session, and (at the end) every file under
the session's base temporary directory, which holds every build dir and state dir the suite
made. Tests add response bodies and error messages with :func:`collect`.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from clawpod.sidecar.manifest import Build

# Short values (like "x") would match by chance; every test credential is longer.
MIN_SECRET_LENGTH = 8
# Files the tests themselves write as input (pod files with deliberately misplaced credentials,
# .env files handed to compose) are not sidecar output; build and state dirs are swept whole.
MAX_FILE_BYTES = 64 * 1024 * 1024


@dataclass
class Sweep:
    secrets: set[str] = field(default_factory=set)
    texts: list[tuple[str, bytes]] = field(default_factory=list)  # (where, content)
    trees: set[Path] = field(default_factory=set)
    collected_bytes: int = 0


SWEEP = Sweep()


def register(*values: str | None) -> None:
    for value in values:
        if value and len(value) >= MIN_SECRET_LENGTH:
            SWEEP.secrets.add(value)


def register_build_env(build: Build, env: Mapping[str, str]) -> None:
    """Register every credential value the sidecar of ``build`` can read from ``env``."""
    names = {key for provider in build.config.providers.values() for key in provider.key_envs}
    names.add("CLAW_OPERATOR_TOKEN")  # the operator API's token (docs/governance.md)
    names.add("CLAW_WEBHOOK_SECRET")  # signs approval webhooks (docs/operators.md)
    basic: set[str] = set()
    for agent in build.agents.values():
        # An OAuth client id names the client and is no secret; its secret is one.
        names.update(
            name
            for t in agent.tools.tools
            for name in (t.execution.auth.env, t.execution.auth.client_secret_env)
            if name
        )
        basic.update(
            t.execution.auth.env
            for t in agent.tools.tools
            if t.execution.auth.type == "basic" and t.execution.auth.env
        )
    register(*(env.get(name) for name in names))
    # basic auth's user:password: the password alone is a secret too
    register(*(env.get(name, "").partition(":")[2] for name in basic))


def collect(where: str, content: str | bytes | None) -> None:
    """Keep text the sidecar produced (response body, error message, metrics page)."""
    if content is None:
        return
    data = content.encode("utf-8", "replace") if isinstance(content, str) else bytes(content)
    SWEEP.texts.append((where, data[:1_000_000]))
    SWEEP.collected_bytes += len(data)


def collect_tree(root: Path) -> None:
    SWEEP.trees.add(Path(root))


class LogCollector(logging.Handler):
    """Keeps every log record of the session (message, arguments and traceback text)."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # a broken format string is not our concern here
            text = str(record.msg)
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        self.count += 1
        collect(f"log {record.name}", text)


def find_leaks(
    secrets: Iterable[str], texts: Iterable[tuple[str, bytes]], trees: Iterable[Path]
) -> list[str]:
    """Where any secret appears, in any encoding an echo takes: ``"<where>: <which secret,
    masked> (<encoding>)"`` lines."""
    needles = [(s, form, needle) for s in secrets for form, needle in encodings(s).items()]
    found: list[str] = []

    def search(where: str, data: bytes) -> None:
        unwrapped = unwrap(data)
        for secret, form, needle in needles:
            if needle in data:
                found.append(f"{where}: contains {mask(secret)} ({form})")
            elif form.startswith("base64") and needle in unwrapped:
                found.append(f"{where}: contains {mask(secret)} ({form}, wrapped into lines)")

    for where, data in texts:
        search(where, data)
    for path in files_under(trees):
        try:
            if path.stat().st_size <= MAX_FILE_BYTES:
                search(str(path), path.read_bytes())
        except OSError:
            continue
    return found


def encodings(secret: str) -> dict[str, bytes]:
    """The forms a service or provider can echo a secret in (written independently of the
    sidecar's redaction, so a form it misses is caught here)."""
    raw = secret.encode()
    forms = {
        "raw": raw,
        "json-escaped": json.dumps(secret)[1:-1].encode(),
        "json \\u-escaped": "".join(f"\\u{ord(c):04x}" for c in secret).encode(),
        "url-encoded": quote(secret, safe="").encode(),
        "hex": raw.hex().encode(),
        "HEX": raw.hex().upper().encode(),
    }
    for offset in range(3):  # the secret's alignment inside a longer base64 text
        encoded = base64.b64encode(b"\0" * offset + raw)
        core = encoded[(offset * 8 + 5) // 6 : ((offset + len(raw)) * 8) // 6]
        forms[f"base64@{offset}"] = core
        forms[f"base64url@{offset}"] = core.replace(b"+", b"-").replace(b"/", b"_")
    distinct: dict[bytes, str] = {}
    for name, needle in forms.items():
        distinct.setdefault(needle, name)  # one name per form: "raw" where they coincide
    return {name: needle for needle, name in distinct.items()}


def unwrap(data: bytes) -> bytes:
    """``data`` without line breaks, raw or JSON-escaped: base64 wrapped at any width (MIME 76,
    PEM 64, LF or CRLF) becomes one line again."""
    for line_break in (b"\r", b"\n", b"\\r", b"\\n"):
        data = data.replace(line_break, b"")
    return data


def files_under(trees: Iterable[Path]) -> list[Path]:
    files: set[Path] = set()
    for tree in trees:
        if tree.is_file():
            files.add(tree)
        elif tree.is_dir():
            files.update(p for p in tree.rglob("*") if p.is_file() and not p.is_symlink())
    return sorted(files)


def mask(secret: str) -> str:
    return secret[:3] + "…" + f"({len(secret)} chars)"
