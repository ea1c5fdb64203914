"""Run inside a container: can it resolve and connect to each target?

argv[1:]: targets as HOST:PORT (a name or an IP address). Prints one JSON object per target:
{"target", "resolved": [addresses] | null, "resolve_error", "connected": bool, "connect_error"}.
"""

import json
import socket
import sys


def probe(target: str) -> dict:
    host, port = target.rsplit(":", 1)
    result = {"target": target, "resolved": None, "resolve_error": None}
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
        result["resolved"] = sorted({info[4][0] for info in infos})
    except OSError as exc:
        result["resolve_error"] = repr(exc)
    try:
        with socket.create_connection((host, int(port)), timeout=3):
            result.update(connected=True, connect_error=None)
    except OSError as exc:
        result.update(connected=False, connect_error=repr(exc))
    return result


print(json.dumps([probe(target) for target in sys.argv[1:]]))
