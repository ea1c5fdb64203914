"""``python -m clawpod.sidecar --build OUT [--host H] [--port P] [--admin-host H]
[--admin-port P] [--state-dir DIR] [--allow-unkeyed-audit] [--verify-key-env VAR]
[--log-level LEVEL]``, ``--version``."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import socket
import sys
import textwrap
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path

from .audit.log import AuditKeyError, AuditStateError
from .build_signature import SignatureError, verify_signature
from .credential_files import (
    FILE_SUFFIX,
    CredentialFileError,
    credential_names,
    with_credential_files,
)
from .governance.webhooks import WebhookSecretError
from .manifest import Build, BuildError, load_build
from .model.env_names import AUDIT_KEY_ENV, OPERATOR_TOKEN_ENV, WEBHOOK_SECRET_ENV
from .observability.logs import configure_logging
from .observability.tracing import ENDPOINT_ENV, configure_tracing
from .server.admin import create_admin_app
from .server.app import create_app
from .server.front.edge import EdgeLimits
from .server.front.serving import listen
from .server.operator.operator_auth import OperatorTokenError
from .server.request.context import STATE_KEY
from .state.lock import INSTANCE_ENV, StateLock, StateLockError, instance_name
from .state.shared_counters import SharedLimitsError
from .transport.keepalive import KEEPALIVE_ENV

log = logging.getLogger("clawpod.sidecar")  # run as __main__: named after the package
DESCRIPTION = (
    "Serve a build made by `clawc compile`: the agents' one endpoint to their LLM providers "
    "(tools injected and run for mediated agents, MCP at /mcp for native ones) and, on a "
    f"second listener, the operator API (/metrics, /readyz, /operator). Needs {AUDIT_KEY_ENV} "
    "(at least 16 bytes) for the audit chain. Outside a pod, pass --host and --state-dir: the "
    "operator listener then listens on the --host address too, unless --admin-host says "
    "otherwise."
)
ENVIRONMENT_HELP = f"""\
environment:
  {AUDIT_KEY_ENV}          keys the audit chain, at least 16 bytes (required
                          unless --allow-unkeyed-audit; clawc audit verify
                          needs the same key)
  {OPERATOR_TOKEN_ENV}     the operator API's and console's bearer token;
                          without it no approval can be decided
  {WEBHOOK_SECRET_ENV}     signs approval webhooks (required with a webhook)
  OPENAI_API_KEY, ...     provider keys and tool credentials, by the names
                          the build gives (sidecar.json)
  NAME{FILE_SUFFIX}               any of the above, read from the file it names
  {INSTANCE_ENV}           this sidecar's name in the audit (default: host)
  {KEEPALIVE_ENV}   milliseconds between keep-alives on streams (5000)
  {ENDPOINT_ENV}
                          export traces over OTLP/HTTP to this URL

example (outside a pod):
  export {AUDIT_KEY_ENV}=$(openssl rand -hex 32)
  export {OPERATOR_TOKEN_ENV}=$(openssl rand -hex 32)
  python -m clawpod.sidecar --build build --host 127.0.0.1 --state-dir state
"""
HELP_WIDTH = 78  # the description is wrapped here; the epilog is laid out by hand
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
SHUTDOWN_TIMEOUT_S = 10.0
YOUNG_GENERATION_THRESHOLD = 10_000  # the collector's default is 700 (see main)
ADMIN_LIMITS = EdgeLimits(max_connections=64)  # a scraper or two and an operator
ADMIN_RESOLVE_WAIT_S = 10.0  # Swarm registers an alias within a second or two
LOCK_CHECK_S = 1.0  # how often the state directory's lock is checked (two stat calls)
# The sidecar's own secrets, readable from NAME_FILE like the build's credentials (SPEC §13.2);
# the webhook secret signs approval webhooks (SPEC §15).
SIDECAR_SECRETS = (AUDIT_KEY_ENV, OPERATOR_TOKEN_ENV, WEBHOOK_SECRET_ENV)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m clawpod.sidecar",
        description=textwrap.fill(DESCRIPTION, HELP_WIDTH),
        epilog=ENVIRONMENT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"clawpod sidecar {_version()}")
    parser.add_argument("--build", required=True, type=Path, help="build directory (clawc output)")
    parser.add_argument("--host", help="listen address (default: sidecar.json listen.host)")
    parser.add_argument("--port", type=int, help="listen port, 0 = any free port")
    parser.add_argument(
        "--admin-host",
        help="operator listener address (default: the --host address when --host is given, "
        "else sidecar.json admin_listen.host: in a compiled pod the sidecar's admin alias, "
        "which resolves only inside the pod)",
    )
    parser.add_argument(
        "--admin-port",
        type=int,
        help="operator listener port for /metrics and /readyz (default: sidecar.json "
        "admin_listen.port, 9090), 0 = any free port",
    )
    parser.add_argument("--state-dir", type=Path, help="audit and continuity storage")
    parser.add_argument(
        "--allow-unkeyed-audit",
        action="store_true",
        help=f"run without {AUDIT_KEY_ENV}: anyone who can write the audit log can rewrite it",
    )
    parser.add_argument(
        "--verify-key-env",
        metavar="VAR",
        help="refuse a build whose digest.sig is missing or not made by the Ed25519 key whose "
        "public half (PEM or base64 of the raw key) is in environment variable VAR",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=LOG_LEVELS,
        help="least severe log record written to stderr (default INFO)",
    )
    return parser.parse_args(argv)


def _version() -> str:
    try:
        return metadata.version("clawpod")
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        return "unknown (not installed)"


def configuration_warnings(build: Build, env: Mapping[str, str]) -> list[str]:
    """What the build asks for that cannot work with this environment, one line each (provider
    keys are checked where their pools are made, server/providers/upstream.py)."""
    warnings = []
    if not env.get(OPERATOR_TOKEN_ENV) and _operator_decides(build):
        warnings.append(
            f"{OPERATOR_TOKEN_ENV} is not set: the pod holds some tool calls for an operator's "
            "approval, and with no operator token no one can decide them (the operator API and "
            "the console are closed); they wait until they expire"
        )
    unset: dict[str, set[str]] = {}
    for agent in build.agents.values():
        for tool in agent.tools.tools:
            for name in tool.execution.auth.credential_envs:
                if not env.get(name):
                    unset.setdefault(name, set()).add(tool.name)
    for name, tools in sorted(unset.items()):
        warnings.append(
            f"{name} is not set: calls of {', '.join(sorted(tools))} are refused "
            "(the service's credential)"
        )
    return warnings


def _operator_decides(build: Build) -> bool:
    """Whether some call of this build can wait for the operator."""
    governance, taint = build.config.governance, build.config.taint
    if taint is not None and taint.mode == "confirm":
        return True
    if governance is None:
        return False
    if governance.approvals.require != "none":
        return True
    return any(
        rule.effect == "confirm" and rule.approver == "operator"
        for rules in governance.rules.values()
        for rule in rules
    )


async def serve(
    build: Build,
    host: str,
    port: int,
    admin: tuple[str, int],
    state_dir: Path,
    *,
    env: dict[str, str],
    state_lock: StateLock,
) -> int:
    try:
        app = create_app(build, state_dir=state_dir, env=env, state_lock=state_lock)
    except (
        AuditKeyError,
        AuditStateError,
        WebhookSecretError,
        OperatorTokenError,
        SharedLimitsError,
    ) as exc:
        print(f"sidecar: refusing to start: {exc}", file=sys.stderr)
        return 1
    limits = EdgeLimits.from_config(build.config)
    try:
        listening = await listen(
            app, host, port, shutdown_timeout_s=SHUTDOWN_TIMEOUT_S, limits=limits
        )
    except OSError as exc:
        print(f"sidecar: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return 1
    admin_host, admin_port = admin
    try:
        await _wait_resolvable(admin_host)
        admin_listening = await listen(
            create_admin_app(app[STATE_KEY], env=env, listen_host=admin_host),
            admin_host,
            admin_port,
            shutdown_timeout_s=SHUTDOWN_TIMEOUT_S,
            limits=ADMIN_LIMITS,
        )
    except OSError as exc:
        await listening.close()
        print(
            f"sidecar: cannot listen on {admin_host}:{admin_port} (the operator listener): "
            f"{exc}; set its address with --admin-host (and --admin-port)",
            file=sys.stderr,
        )
        return 1
    # What is loaded by now (build, schemas, libraries) lives as long as the process: the
    # collector need not scan it again on every full collection.
    gc.collect()
    gc.freeze()
    # A request allocates a few thousand container objects that reference counting frees; at
    # the default threshold (700) the young generation is scanned several times per request
    # anyway, for the few that live on. A larger one scans it once per several requests.
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        bound_host, bound_port = listening.address
        admin_bound_port = admin_listening.address[1]
        # Exactly the first line tells operators and health scripts that the sidecar is up.
        print(f"listening on http://{host}:{bound_port}", flush=True)
        print(f"operator listener on http://{admin_host}:{admin_bound_port}", flush=True)
        log.info("listening on http://%s:%s (bound %s)", host, bound_port, bound_host)
        watch = asyncio.ensure_future(_until_lost(state_lock))
        watch.add_done_callback(lambda _: stop.set())
        await stop.wait()
        if watch.done() and not watch.cancelled():
            print(
                f"sidecar: stopping: the lock on state directory {state_dir} was lost (the "
                "directory or its .lock was replaced); another sidecar may own it now",
                file=sys.stderr,
            )
            return 1
        watch.cancel()
        log.info("shutting down")
        return 0
    finally:
        await admin_listening.close()
        await listening.close()  # the app's cleanup flushes the audit log


async def _until_lost(state_lock: StateLock) -> None:
    """Return once the state directory's lock is lost: then a second sidecar may start on the
    directory, so this one stops taking requests (its /readyz answers 503 meanwhile)."""
    while state_lock.held():
        await asyncio.sleep(LOCK_CHECK_S)


async def _wait_resolvable(host: str) -> None:
    """Wait (bounded) for the operator listener's name to resolve: Swarm registers a task's
    network aliases only once its container runs, so a name that is the sidecar's own alias may
    be unknown for its first moments. Raises the last resolution error when it never resolves."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ADMIN_RESOLVE_WAIT_S
    while True:
        try:
            await loop.getaddrinfo(host, None)
            return
        except socket.gaierror:
            if loop.time() >= deadline:
                raise
            await asyncio.sleep(0.5)


def _event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop


def verify_build_signature(build: Build, key_env: str, env: dict[str, str]) -> None:
    key = env.get(key_env)
    if not key:
        raise SignatureError(f"--verify-key-env: environment variable {key_env} is not set")
    try:
        verify_signature(build.root, key, build.digest_json)
    except ImportError:
        raise SignatureError("--verify-key-env needs the cryptography package") from None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging(args.log_level)
    configure_tracing(os.environ)
    try:
        build = load_build(args.build)
        env = with_credential_files(os.environ, credential_names(build, SIDECAR_SECRETS))
        if args.verify_key_env:
            verify_build_signature(build, args.verify_key_env, env)
    except (BuildError, SignatureError, CredentialFileError) as exc:
        print(f"sidecar: refusing to start: {exc}", file=sys.stderr)
        return 1
    if not env.get(AUDIT_KEY_ENV) and not args.allow_unkeyed_audit:
        print(
            f"sidecar: refusing to start: {AUDIT_KEY_ENV} is not set; the audit chain needs "
            "a key (for example `openssl rand -hex 32`), or pass --allow-unkeyed-audit",
            file=sys.stderr,
        )
        return 1
    for warning in configuration_warnings(build, env):
        log.warning("%s", warning)
    listen = build.config.listen
    host = args.host if args.host is not None else listen.host
    port = args.port if args.port is not None else listen.port
    admin_listen = build.config.admin_listen
    admin_host = args.admin_host if args.admin_host is not None else args.host
    if admin_host is None:
        # In a pod: the admin alias. Outside one, --host names the one address that exists.
        admin_host = admin_listen.host
    admin_port = args.admin_port if args.admin_port is not None else admin_listen.port
    state_dir = args.state_dir if args.state_dir is not None else Path(build.config.state_dir)
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"sidecar: cannot create state directory {state_dir}: {exc}", file=sys.stderr)
        return 1
    # Before anything under the directory is opened: a refused sidecar writes nothing there.
    state_lock = StateLock(state_dir, instance_name(env))
    try:
        state_lock.acquire()
    except StateLockError as exc:
        print(f"sidecar: refusing to start: {exc}", file=sys.stderr)
        return 1
    try:
        with asyncio.Runner(loop_factory=_event_loop_factory()) as runner:
            return runner.run(
                serve(
                    build,
                    host,
                    port,
                    (admin_host, admin_port),
                    state_dir,
                    env=env,
                    state_lock=state_lock,
                )
            )
    finally:
        state_lock.release()


if __name__ == "__main__":
    sys.exit(main())
