"""Run inside a container: can it resolve and connect to each target?

argv[1:]: targets as HOST:PORT (a name or an IP address). Prints a JSON list with, per target,
{"target", "resolved": [addresses] | null, "resolve_error", "connected": bool, "connect_error"}.
A name that does not resolve is not connected to (there is nothing to connect to). Targets are
probed concurrently because a failing lookup can take seconds.
"""

import json
import socket
import sys
from concurrent.futures import ThreadPoolExecutor


def probe(target: str) -> dict:
    host, port = target.rsplit(":", 1)
    result = {"target": target, "resolved": None, "resolve_error": None}
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
        result["resolved"] = sorted({info[4][0] for info in infos})
    except OSError as exc:
        return {**result, "resolve_error": repr(exc), "connected": False, "connect_error": None}
    try:
        with socket.create_connection((result["resolved"][0], int(port)), timeout=3):
            return {**result, "connected": True, "connect_error": None}
    except OSError as exc:
        return {**result, "connected": False, "connect_error": repr(exc)}


with ThreadPoolExecutor(max_workers=len(sys.argv)) as pool:
    print(json.dumps(list(pool.map(probe, sys.argv[1:]))))
