"""The mediated pod of tests/mediation (stub upstream, real tool service, in-process sidecar)."""

from tests.mediation.conftest import make_pod, pod  # noqa: F401  (fixtures)
