"""Run inside a container: PING a Redis/Valkey server without its password.

argv[1]: HOST:PORT. Prints {"reply": the first line of the server's answer} as JSON: a server
that requires its password answers ``-NOAUTH ...``.
"""

import json
import socket
import sys

host, port = sys.argv[1].rsplit(":", 1)
with socket.create_connection((host, int(port)), timeout=5) as connection:
    connection.sendall(b"*1\r\n$4\r\nPING\r\n")
    reply = connection.makefile("rb").readline(4096)
print(json.dumps({"reply": reply.decode(errors="replace").strip()}))
