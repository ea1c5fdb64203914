#!/bin/sh
# Entry point of the sidecar image. Arguments that start with "-" are sidecar flags
# (`docker run IMAGE --build /claw/build`); anything else is a full command line, such as the
# `python -m clawpod.sidecar ...` that a compiled pod's compose file gives, and runs as is.
case "${1:-}" in
  -*) set -- python -m clawpod.sidecar "$@" ;;
esac
exec "$@"
