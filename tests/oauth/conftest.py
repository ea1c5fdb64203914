from collections.abc import Iterator

import pytest

from tests.support.authorization_server import (
    AuthorizationServerProcess,
    running_authorization_server,
)


@pytest.fixture(scope="module")
def authorization_server() -> Iterator[AuthorizationServerProcess]:
    """The suite's authorization server, one process per test module."""
    with running_authorization_server() as server:
        yield server
