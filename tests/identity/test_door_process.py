"""The door of a real sidecar process against a real JWKS server on 127.0.0.1 (SPEC §21): a flood
of tokens with made-up ``kid``s fetches the key set once, a key rotated at the provider is
accepted after one refresh, and a JWKS URL that hangs or answers 1 GB refuses the tokens it
should verify, clearly, while static tokens still work."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import aiohttp
import pytest

from clawpod.sidecar.manifest import EndUsers, TokenIssuer
from tests.support import secret_sweep
from tests.support.builds import AgentSpec, providers_for, write_build
from tests.support.jwks_server import AUDIENCE, ISSUER, SigningKey, claims, jwks_server
from tests.support.sidecar import TEST_AUDIT_KEY, TEST_PROVIDER_KEYS
from tests.support.sidecar_process import sidecar_process

GUARD_S = 30.0  # against a hang, never a timing assertion


def _build(tmp_path: Path, jwks_url: str, refresh_ms: int = 60000) -> tuple[Path, str]:
    issuer = TokenIssuer(
        issuer=ISSUER, audience=AUDIENCE, jwks_url=jwks_url, jwks_refresh_ms=refresh_ms
    )
    users = EndUsers(issuer=ISSUER, audience=AUDIENCE, jwks_url=jwks_url, header="x-end-user")
    root = tmp_path / "build"
    tokens = write_build(
        root,
        [AgentSpec("agent", mode="native")],
        providers_for("http://127.0.0.1:9/v1"),
        identity=issuer,
        end_users=users,
    )
    return root, tokens["agent"]


def _env() -> dict[str, str]:
    return {**TEST_PROVIDER_KEYS, "CLAW_AUDIT_KEY": TEST_AUDIT_KEY}


async def _models(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> tuple:
    async with session.get(url + "/v1/models", headers=headers) as response:
        return response.status, await response.text()


async def test_an_unknown_kid_flood_fetches_the_key_set_once(tmp_path: Path) -> None:
    key = SigningKey("k1")
    async with jwks_server(key) as server:
        build, _ = _build(tmp_path, server.jwks_url)
        async with (
            sidecar_process(build, tmp_path / "state", _env()) as sidecar,
            aiohttp.ClientSession() as session,
        ):
            good = key.sign(claims("agent"))
            secret_sweep.register(good)
            assert (await _models(session, sidecar.url, {"Authorization": f"Bearer {good}"}))[
                0
            ] == 200
            assert server.fetches == 1
            forged = [
                key.sign(claims("agent"), kid=uuid.uuid4().hex)  # made-up kids
                for _ in range(200)
            ]
            answers = await asyncio.wait_for(
                asyncio.gather(
                    *(
                        _models(session, sidecar.url, {"Authorization": f"Bearer {t}"})
                        for t in forged
                    ),
                ),
                GUARD_S,
            )
            assert {status for status, _ in answers} == {403}
            assert all("does not publish" in text for _, text in answers)
            # The same flood as end users' tokens: still no fetch within the interval.
            static = {"Authorization": f"Bearer {good}"}
            answers = await asyncio.gather(
                *(_models(session, sidecar.url, {**static, "x-end-user": t}) for t in forged[:50])
            )
            assert {status for status, _ in answers} == {403}
            assert server.fetches == 1


async def test_a_rotated_key_is_accepted_after_one_refresh(tmp_path: Path) -> None:
    old = SigningKey("old")
    async with jwks_server(old) as server:
        build, _ = _build(tmp_path, server.jwks_url, refresh_ms=1000)
        async with (
            sidecar_process(build, tmp_path / "state", _env()) as sidecar,
            aiohttp.ClientSession() as session,
        ):
            headers = {"Authorization": f"Bearer {old.sign(claims('agent'))}"}
            assert (await _models(session, sidecar.url, headers))[0] == 200
            new = SigningKey("new")
            server.keys = [new]
            headers = {"Authorization": f"Bearer {new.sign(claims('agent'))}"}
            deadline = time.monotonic() + GUARD_S
            while (await _models(session, sidecar.url, headers))[0] != 200:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
            assert server.fetches == 2


@pytest.mark.parametrize(
    ("which", "reason"),
    [("hanging_url", "did not answer in time"), ("endless_url", "larger than")],
)
async def test_a_hostile_jwks_url_fails_closed(tmp_path: Path, which: str, reason: str) -> None:
    key = SigningKey("k1")
    async with jwks_server(key) as server:
        build, static = _build(tmp_path, getattr(server, which))
        async with (
            sidecar_process(build, tmp_path / "state", _env()) as sidecar,
            aiohttp.ClientSession() as session,
        ):
            jwt_headers = {"Authorization": f"Bearer {key.sign(claims('agent'))}"}
            status, text = await asyncio.wait_for(
                _models(session, sidecar.url, jwt_headers), GUARD_S
            )
            assert status == 403 and "does not publish" in text
            # The agent's static token does not depend on the identity provider.
            assert (await _models(session, sidecar.url, {"Authorization": f"Bearer {static}"}))[
                0
            ] == 200
        stderr = (tmp_path / "sidecar.stderr").read_text()
        warning = next(line for line in stderr.splitlines() if "JWKS of" in line)
        assert reason in warning and "its tokens are refused" in warning
