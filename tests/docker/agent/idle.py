"""Keep the agent container alive until it is told to stop (PID 1 must honour SIGTERM)."""

import signal
import sys

signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
signal.pause()
