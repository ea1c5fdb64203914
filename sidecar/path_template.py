"""The ``http.path`` template grammar: an origin-form path with ``{name}`` placeholders.

One definition for the compiler (which refuses a bad template) and the executor (which fills
one). Standard library only: this module is part of the build contract.

Grammar (RFC 3986 ``absolute-path`` with placeholders in place of whole or partial segments)::

    template    = 1*( "/" segment )
    segment     = *( pchar / placeholder )
    placeholder = "{" name "}"          ; name: a letter or "_", then letters, digits, "_.-"
    pchar       = unreserved / pct-encoded / sub-delims / ":" / "@"

No spaces, CR/LF or other control characters, no ``?`` or ``#`` (arguments go to the query
string or body, never into the template), and no ``.``/``..`` segments.
"""

from __future__ import annotations

import re

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.-]*)\}")
_PERCENT_ENCODED = re.compile(r"%[0-9A-Fa-f]{2}")
_PATH_CHARACTER = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@/]")


class PathTemplateError(ValueError):
    """A path template that breaks the grammar; ``str()`` says where and why."""


def split_path_template(template: str) -> tuple[str, ...]:
    """``literal, name, literal, name, ..., literal``: literals at even indices.

    Does not validate; a template that came through :func:`check_path_template` splits into
    exactly its placeholders.
    """
    return tuple(PLACEHOLDER.split(template))


def placeholder_names(template: str) -> list[str]:
    """The placeholder names of ``template``, in order."""
    return PLACEHOLDER.findall(template)


def _literal_problem(literal: str) -> str | None:
    unencoded = _PERCENT_ENCODED.sub("", literal)
    bad = next((c for c in unencoded if not _PATH_CHARACTER.fullmatch(c)), None)
    if bad is None:
        return None
    if bad == "%":
        return "a '%' not followed by two hex digits"
    if bad in "{}":
        return "unbalanced braces or a malformed {placeholder} (names: letters, digits, _.-)"
    if bad == "?":
        return "'?' is not allowed: arguments become the query string"
    if bad == "#":
        return "'#' is not allowed: a fragment is never sent"
    if bad == " ":
        return "spaces are not allowed (percent-encode them as %20)"
    if ord(bad) < 0x20 or ord(bad) == 0x7F:
        return f"control character {bad!r} is not allowed"
    return f"character {bad!r} is not allowed in a URL path (percent-encode it)"


def check_path_template(template: str) -> None:
    """Raise :class:`PathTemplateError` unless ``template`` follows the grammar above."""
    if not template.startswith("/"):
        raise PathTemplateError("must start with '/'")
    parts = split_path_template(template)
    for literal in parts[::2]:
        problem = _literal_problem(literal)
        if problem is not None:
            raise PathTemplateError(problem)
    names = parts[1::2]
    if len(names) != len(set(names)):
        raise PathTemplateError("a placeholder appears twice")
    for segment in template.split("/")[1:]:
        if segment in (".", ".."):
            raise PathTemplateError(f"'{segment}' segments are not allowed")
