from collections.abc import Iterator

import pytest

from tests.support import secret_sweep
from tests.support.authorization_server import (
    AuthorizationServerProcess,
    running_authorization_server,
)


@pytest.fixture(scope="module")
def authorization_server() -> Iterator[AuthorizationServerProcess]:
    """The suite's authorization server, one process per test module. Every access token it
    issued joins the session's credential sweep: no fetched token may appear in any output,
    log or file of the suite (tests/support/secret_sweep.py)."""
    with running_authorization_server() as server:
        yield server
        secret_sweep.register(*server.tokens())
