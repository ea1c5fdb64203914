"""The hosts URLs name, as the WHATWG URL standard reads them (governance/urls.py): the cases
are the standard's own examples and those of its conformance data (web-platform-tests
url/resources/urltestdata.json), each with the host a browser, Node's URL and fetch read."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from clawpod.sidecar.governance.urls import url_hosts

CASES = [
    # Special schemes skip any run of slashes and backslashes, none included.
    ("https:evil.example", ["evil.example"]),
    ("https:/evil.example", ["evil.example"]),
    ("https:\\\\evil.example", ["evil.example"]),
    ("https:///\\/evil.example/x", ["evil.example"]),
    ("HtTpS://EVIL.example", ["evil.example"]),
    ("wss:evil.example", ["evil.example"]),
    # A backslash ends a special URL's authority, so the "@" after it is in the path.
    ("https://evil.example\\@intranet.example", ["evil.example"]),
    ("http://foo.com/\\@", ["foo.com"]),
    # Userinfo ends at the last "@" (urltestdata: "http://::@c@d:2").
    ("http://::@c@d:2", ["d"]),
    ("http://&a:foo(b]c@d:2/", ["d"]),
    ("https://intranet.example@evil.example/", ["evil.example"]),
    # Tabs and newlines are removed anywhere (urltestdata: "http://example\t.\norg").
    ("http://example\t.\norg", ["example.org"]),
    ("ht\ntps://ev\til.example", ["evil.example"]),
    # Scheme-relative references name a host against an http(s) base.
    ("//evil.example/x", ["evil.example"]),
    ("\\\\x\\hello", ["x"]),  # urltestdata, against http://example.org/foo/bar
    ("/\\evil.example", ["evil.example"]),
    ("see //evil.example/x", ["evil.example"]),
    # Hosts are percent-decoded, then mapped by UTS #46 (full-width letters, the
    # ideographic full stop).
    ("https://evil%2Eexample", ["evil.example", "evil.example"]),
    ("https://\uff45\uff56\uff49\uff4c\u3002example", ["evil.example"]),
    ("https://stra\u00dfe.example", ["xn--strae-oqa.example"]),  # not "strasse"
    # IPv4 in any of the standard's number forms.
    ("http://0x7f.1/", ["127.0.0.1"]),
    ("http://2130706433/", ["127.0.0.1"]),
    ("http://0177.0.0.1/", ["127.0.0.1"]),
    ("http://192.168.0.257", [None]),
    ("http://1.2.3.4.5", [None]),
    ("http://[::1]:8080/", ["[::1]"]),
    ("http://[0:0::1]", ["[::1]"]),
    # What cannot be parsed.
    ("http://f:b/c", [None]),
    ("http://f:999999/c", [None]),
    ("https://[intranet.example/", [None]),
    ("http://a<b.example", ["a"]),  # prose ends at "<"
    ("https://evil%00.example", [None, None]),
    ("https://\ufffd.example", [None]),
    ("file:///etc/passwd", [None]),
    ("file://fileserver/share", ["fileserver"]),
    # Other schemes: an opaque host after "//" only.
    ("git://evil.example/repo", ["evil.example"]),
    ("mailto:someone@evil.example", []),
    # Prose that names no URL.
    ("use https: it is safer", []),
    ("Attached file: report.pdf", []),
    ("a//b and c:/d", []),
    ("x = a // b;\n// a comment\nreturn x", []),  # code: the newline is removed first
]
# Node's URL, given each case that is one URL (not prose): parsed alone, or against an https
# base when it is scheme-relative. A host it cannot parse, or an empty one, is null.
NODE_HOSTNAMES = """
const base = "https://service.example/";
const host = (text) => { try { return new URL(text); } catch { return new URL(text, base); } };
const read = (text) => { try { return host(text).hostname || null; } catch { return null; } };
process.stdout.write(JSON.stringify(JSON.parse(process.argv[1]).map(read)));
"""


@pytest.mark.parametrize(("text", "hosts"), CASES)
def test_the_host_a_client_reads(text: str, hosts: list[str | None]) -> None:
    assert list(url_hosts(text)) == hosts


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js on PATH")
def test_node_reads_the_same_hosts() -> None:
    """The real client agrees on every case that is a whole URL."""
    urls = [
        (text, set(hosts))
        for text, hosts in CASES
        if len(set(hosts)) == 1 and not any(c in text for c in " <")
    ]
    argument = json.dumps([text for text, _ in urls])
    out = subprocess.run(
        ["node", "-e", NODE_HOSTNAMES, argument], capture_output=True, check=True, timeout=30
    )
    assert [{host} for host in json.loads(out.stdout)] == [hosts for _, hosts in urls]
