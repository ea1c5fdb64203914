"""``clawc``: compile pod files into runnable builds, look inside them, and operate running
sidecars (approvals, audit, discover)."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO

from ..compiler.errors import CompileError, display_path
from ..sidecar.model.env_names import AUDIT_KEY_ENV, OPERATOR_TOKEN_ENV
from .openapi_import import add_import_parser, import_command

TARGETS = ("compose", "kubernetes", "swarm")

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2

_MAIN_HELP = """\
clawc turns a pod file (a docker compose file with x-claw blocks) and the service
descriptors it names into a build directory: a runnable compose file with the
sidecar added, and per-agent manifests of the tools each agent may use.

examples:
  clawc compile compose/examples/trading-desk/pod.yml
      writes compose/examples/trading-desk/build/ (compose.yml, sidecar.json,
      context/<agent>/..., agents/<agent>.env, digest.json)
  clawc validate pod.yml                 check everything, write nothing
  clawc inspect build/ --agent analyst   what an agent sees, how its tools execute
  clawc schema pod > pod.schema.json     JSON Schema of x-claw, for editors
  clawc import openapi api.yaml --service billing -o descriptors/billing.yaml
                                         a descriptor from an OpenAPI document
  clawc audit verify STATE_DIR --build compose/examples/trading-desk/build
      check the audit hash chains (STATE_DIR: the sidecar's --state-dir,
      outside the build; CLAW_AUDIT_KEY: the sidecar's key)

exit status: 0 ok, 1 invalid input, 2 usage error
"""

_COMPILE_HELP = f"""\
examples:
  clawc compile pod.yml                       build/ beside pod.yml
  clawc compile pod.yml -o /srv/desk-build    somewhere else
  clawc compile pod.yml --rotate-tokens       new agent tokens (old ones stop working)
  clawc compile pod.yml --sidecar-image registry.example/clawpod/sidecar:0.1.0

Recompiling the same inputs gives byte-identical output and keeps the agent tokens.
Run the result with (the sidecar refuses to start without an audit key;
keep it, `clawc audit verify` needs it):
  export {AUDIT_KEY_ENV}=$(openssl rand -hex 32)
  export {OPERATOR_TOKEN_ENV}=$(openssl rand -hex 32)
  docker compose -f OUT/compose.yml up
Provider keys and service credentials are read by the sidecar from the environment
at run time (they are referenced as ${{VAR}}); no value is ever written to OUT except
the agent tokens in OUT/agents/*.env (mode 0600).
"""


def _parser() -> argparse.ArgumentParser:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="clawc", description=_MAIN_HELP, formatter_class=formatter
    )
    parser.add_argument("--version", action="version", version=f"clawc {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    compile_ = commands.add_parser(
        "compile",
        help="compile a pod file into a build directory",
        epilog=_COMPILE_HELP,
        formatter_class=formatter,
    )
    compile_.add_argument(
        "pod", type=Path, metavar="POD", help="pod file (compose YAML with x-claw)"
    )
    compile_.add_argument(
        "-o", "--out", type=Path, metavar="OUT", help="build directory (default: build/ beside POD)"
    )
    compile_.add_argument(
        "--rotate-tokens", action="store_true", help="replace the agent tokens of an earlier build"
    )
    compile_.add_argument(
        "--sidecar-image", metavar="IMAGE", help="run this sidecar image instead of building it"
    )
    compile_.add_argument(
        "--discover",
        action="store_true",
        help="first refresh each JSON descriptor declaring 'mcp' from its running service",
    )
    compile_.add_argument(
        "--target",
        choices=TARGETS,
        default="compose",
        help="what to deploy on: compose.yml (default), k8s/ for `kubectl apply -k`, or "
        "stack.yml for `docker stack deploy` (docs/kubernetes.md, docs/swarm.md)",
    )
    compile_.add_argument(
        "--sign-key-env",
        metavar="VAR",
        help="sign digest.json with the Ed25519 private key in environment variable VAR "
        "(PEM or base64 of the raw key); the sidecar checks it with --verify-key-env",
    )

    add_import_parser(commands, formatter)

    discover = commands.add_parser(
        "discover",
        help="write a running MCP service's tool list as a descriptor",
        epilog="example:\n  clawc discover http://127.0.0.1:4100/mcp --token-env NEWS_TOKEN "
        "-o descriptors/news.json",
        formatter_class=formatter,
    )
    discover.add_argument("url", metavar="SERVICE_URL", help="the service's MCP endpoint")
    discover.add_argument("-o", "--out", type=Path, metavar="FILE", help="default: stdout")
    discover.add_argument(
        "--token-env", metavar="VAR", help="send this variable's value as a bearer token"
    )

    validate = commands.add_parser(
        "validate",
        help="run every check of compile, write nothing",
        epilog="example:\n  clawc validate compose/examples/trading-desk/pod.yml",
        formatter_class=formatter,
    )
    validate.add_argument(
        "pod", type=Path, metavar="POD", help="pod file (compose YAML with x-claw)"
    )

    inspect = commands.add_parser(
        "inspect",
        help="show what each agent of a build sees and how its tools execute",
        epilog="examples:\n  clawc inspect compose/examples/trading-desk/build\n"
        "  clawc inspect build --agent trader",
        formatter_class=formatter,
    )
    inspect.add_argument(
        "out", type=Path, metavar="OUT", help="a build directory written by clawc compile"
    )
    inspect.add_argument("--agent", metavar="ID", help="only this agent")
    inspect.add_argument(
        "--state-dir",
        type=Path,
        metavar="DIR",
        help="the sidecar's state dir: mark the tools it quarantined (definition changed)",
    )

    schema = commands.add_parser(
        "schema",
        help="print a JSON Schema for editors",
        epilog="examples:\n  clawc schema descriptor > descriptor.schema.json\n  clawc schema pod",
        formatter_class=formatter,
    )
    schema.add_argument(
        "kind",
        choices=["descriptor", "pod"],
        help="descriptor: a service's tools (descriptors/*.json|yaml); pod: the x-claw blocks",
    )

    audit = commands.add_parser(
        "audit",
        help="verify or show the sidecar's audit log",
        epilog="examples:\n  clawc audit verify STATE_DIR --build build\n"
        "  clawc audit verify STATE_DIR --key-env MY_AUDIT_KEY\n"
        "  clawc audit show STATE_DIR --agent analyst --limit 20\n"
        "  clawc audit show --sidecar http://pod-a:9090 --sidecar http://pod-b:9090\n"
        "verify exits 0 when every chain is intact, 1 when a log was modified or is missing, "
        "3 when the chains are keyed and the key is not set (no verdict)",
        formatter_class=formatter,
    )
    audit.add_argument(
        "action",
        choices=["verify", "show"],
        help="verify: check every agent's hash chain; show: list the records",
    )
    audit.add_argument(
        "state_dir", type=Path, nargs="?", metavar="STATE_DIR", help="the sidecar's --state-dir"
    )
    audit.add_argument(
        "--sidecar",
        action="append",
        metavar="URL",
        help="show: read running sidecars' operator listeners instead (repeat for many pods; "
        f"the token from {OPERATOR_TOKEN_ENV})",
    )
    audit.add_argument(
        "--build", type=Path, metavar="OUT", help="verify: every agent of this build has a log"
    )
    audit.add_argument(
        "--key-env",
        default=AUDIT_KEY_ENV,
        metavar="VAR",
        help=f"verify: the environment variable holding the audit key (default {AUDIT_KEY_ENV})",
    )
    audit.add_argument("--agent", metavar="ID", help="show: only this agent")
    audit.add_argument("--limit", type=int, metavar="N", help="show: only the last N records")
    audit.add_argument(
        "--end-user", metavar="SUBJECT", help="show: only the requests for this end user"
    )
    _add_approvals(commands)
    tasks = commands.add_parser(
        "tasks",
        help="the MCP tasks not finished in running sidecars (SPEC §22)",
        epilog="examples:\n  clawc tasks --sidecar http://localhost:9090\n"
        f"the operator token is read from {OPERATOR_TOKEN_ENV}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    tasks.add_argument(
        "--sidecar",
        required=True,
        action="append",
        metavar="URL",
        help="a sidecar's operator listener; repeat for many pods (one list)",
    )
    budgets = commands.add_parser(
        "budgets",
        help="the fleet's budgets as the shared store of limits counts them (SPEC §24)",
        epilog="examples:\n  clawc budgets --url-env REDIS_URL\n"
        "  clawc budgets --url-env REDIS_URL --day 2026-12-01 --json",
        formatter_class=formatter,
    )
    budgets.add_argument(
        "--url-env",
        required=True,
        metavar="VAR",
        help="the environment variable holding the store's redis:// URL",
    )
    budgets.add_argument("--day", type=_day, metavar="YYYY-MM-DD", help="default: today (UTC)")
    budgets.add_argument("--json", action="store_true", help="one JSON document")
    return parser


def _add_approvals(commands: Any) -> None:
    approvals = commands.add_parser(
        "approvals",
        help="list, approve or deny tool calls waiting for an operator",
        epilog="examples:\n  clawc approvals list --sidecar http://localhost:9090\n"
        "  clawc approvals list --sidecar http://pod-a:9090 --sidecar http://pod-b:9090\n"
        "  clawc approvals approve apr_0123 --sidecar URL --reason 'checked'\n"
        f"the operator token is read from {OPERATOR_TOKEN_ENV}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    approvals.add_argument(
        "action",
        choices=["list", "approve", "deny"],
        help="list the pending approvals, or decide the one named by ID",
    )
    approvals.add_argument(
        "approval_id", nargs="?", metavar="ID", help="approve/deny: the approval (apr_...)"
    )
    approvals.add_argument(
        "--sidecar",
        required=True,
        action="append",
        metavar="URL",
        help="a sidecar's operator listener; repeat for many pods (one list)",
    )
    approvals.add_argument("--reason", help="approve/deny: why (audited)")


def _day(text: str) -> str:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        raise argparse.ArgumentTypeError(f"not a day (YYYY-MM-DD): {text!r}")
    return text


def _version() -> str:
    try:
        return metadata.version("clawpod")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _default_out(pod: Path) -> Path:
    return pod.parent / "build"


def _warn(warnings: list[str], err: TextIO) -> None:
    for warning in warnings:
        err.write(f"clawc: warning: {warning}\n")


def _compile(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ..compiler.output.build import write_build
    from ..compiler.output.host_isolation import (
        engine_warning,
        firewall_rules_in_place,
        local_engine_version,
    )
    from ..compiler.pod import compile_pod

    if args.discover:
        from .discover import refresh_pod_descriptors

        for path in refresh_pod_descriptors(args.pod):
            out.write(f"discovered the tools of {display_path(path)}\n")
    pod = compile_pod(args.pod)
    _warn(pod.warnings, err)
    target = args.out or _default_out(args.pod)
    target_warnings = write_build(
        pod,
        target,
        rotate_tokens=args.rotate_tokens,
        sidecar_image=args.sidecar_image,
        target=args.target,
    )
    _warn(target_warnings, err)
    if args.sign_key_env:
        _sign(target, args.sign_key_env)
    if args.target == "compose":  # the host's gateway: a bridge network's concern only
        version = local_engine_version()
        if version is not None:
            warning = engine_warning(version, firewall_rules_in_place(os.environ))
            _warn([warning] if warning else [], err)
    summary = (
        ", ".join(f"{a.id} ({a.mode}, {len(a.tools)} tools)" for a in pod.agents) or "no agents"
    )
    out.write(f"compiled pod {pod.name}: {summary}\n")
    out.write(f"wrote {display_path(target)}; run: {_run_line(args.target, target, pod)}\n")
    return EXIT_OK


def _run_line(target_kind: str, out: Path, pod: Any) -> str:
    if target_kind == "kubernetes":
        return f"kubectl apply -k {display_path(out / 'k8s')} (docs/kubernetes.md)"
    if target_kind == "swarm":
        from ..compiler.output.compose import project_name

        stack = display_path(out / "stack.yml")
        return f"docker stack deploy -c {stack} {project_name(pod.name)} (docs/swarm.md)"
    return f"docker compose -f {display_path(out / 'compose.yml')} up"


def _sign(build: Path, key_env: str) -> None:
    from ..sidecar.build_signature import SignatureError, sign_digest

    key = os.environ.get(key_env)
    if not key:
        raise CompileError(f"--sign-key-env: environment variable {key_env} is not set")
    try:
        sign_digest(build, key)
    except SignatureError as exc:
        raise CompileError(f"--sign-key-env {key_env}: {exc}") from None


def _validate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ..compiler.output.build import render_build
    from ..compiler.pod import compile_pod

    pod = compile_pod(args.pod)
    _warn(pod.warnings, err)
    tokens = {agent.id: "claw_" + "0" * 43 for agent in pod.agents}
    render_build(pod, _default_out(args.pod), tokens, sidecar_image="clawpod/sidecar")
    tools = sum(len(s.loaded.tools) for s in pod.tool_services.values())
    out.write(
        f"{display_path(args.pod)}: valid (pod {pod.name}, {len(pod.agents)} agents, "
        f"{len(pod.tool_services)} tool services, {tools} tools)\n"
    )
    return EXIT_OK


_COMPILER_EXTRA_MODULES = {"yaml", "jinja2", "docker", "openapi_spec_validator"}
_POD_FILE_NAMES = ("pod.yml", "pod.yaml", "compose.yml", "compose.yaml", "docker-compose.yml")


def _not_a_build(path: Path) -> str | None:
    """Why ``path`` is no build directory, with the command that makes one; None if it is."""
    if (path / "digest.json").is_file():
        return None
    shown = display_path(path)
    if not path.exists():
        return (
            f"{shown} does not exist; clawc compile POD writes a build (default: build/ beside POD)"
        )
    pods = [path] if path.is_file() else [path / n for n in _POD_FILE_NAMES if (path / n).is_file()]
    if not pods:
        return f"{shown} is not a build directory (no digest.json); clawc compile POD writes one"
    pod = pods[0]
    build = _default_out(pod)
    kind = "a pod file" if path.is_file() else "a pod folder"
    then = f"clawc inspect {display_path(build)}"
    if (build / "digest.json").is_file():
        return f"{shown} is {kind}, not a build; its build is here: {then}"
    return f"{shown} is {kind}, not a build; run clawc compile {display_path(pod)}, then {then}"


def _inspect(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from .inspect import inspect_command

    if problem := _not_a_build(args.out):
        raise CompileError(problem)
    inspect_command(args.out, out, args.agent, args.state_dir)
    return EXIT_OK


def _discover(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from .discover import discover_descriptor, write_descriptor

    descriptor = discover_descriptor(args.url, args.token_env)
    if args.out is None:
        out.write(json.dumps(descriptor, indent=2, ensure_ascii=False) + "\n")
    else:
        write_descriptor(descriptor, args.out)
        out.write(f"wrote {len(descriptor['tools'])} tool(s) to {display_path(args.out)}\n")
    return EXIT_OK


def _schema(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from .editor_schemas import descriptor_schema, pod_schema

    schema = descriptor_schema() if args.kind == "descriptor" else pod_schema()
    out.write(json.dumps(schema, indent=2) + "\n")
    return EXIT_OK


def _audit(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from .audit import remote_show_command, show_command, verify_command

    if args.action == "show" and args.sidecar:
        return remote_show_command(
            args.sidecar, out, err, agent=args.agent, limit=args.limit, end_user=args.end_user
        )
    if args.state_dir is None:
        err.write(f"clawc: error: audit {args.action} needs STATE_DIR (or show --sidecar URL)\n")
        return 2
    if args.action == "verify":
        return verify_command(args.state_dir, out, build=args.build, key_env=args.key_env)
    return show_command(
        args.state_dir, out, agent=args.agent, limit=args.limit, end_user=args.end_user
    )


def _tasks(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from .running_tasks import tasks_command

    return tasks_command(args.sidecar, out, err)


def _approvals(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from .approvals import approvals_command

    return approvals_command(args.action, args.sidecar, args.approval_id, args.reason, out, err)


def _budgets(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from .budgets import budgets_command

    return budgets_command(args.url_env, args.day, args.json, out, err)


_COMMANDS = {
    "compile": _compile,
    "validate": _validate,
    "inspect": _inspect,
    "discover": _discover,
    "import": import_command,
    "schema": _schema,
    "audit": _audit,
    "approvals": _approvals,
    "tasks": _tasks,
    "budgets": _budgets,
}


def _internal_error(exc: Exception, err: TextIO) -> int:
    """Never a traceback for the user; CLAWC_DEBUG=1 shows it."""
    if os.environ.get("CLAWC_DEBUG"):
        raise exc
    err.write(
        f"clawc: internal error ({type(exc).__name__}: {exc}); "
        "rerun with CLAWC_DEBUG=1 to see where\n"
    )
    return EXIT_INVALID


def main(
    argv: Sequence[str] | None = None, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    out, err = stdout or sys.stdout, stderr or sys.stderr
    args = _parser().parse_args(argv)  # exits with 2 on usage errors
    from ..sidecar.manifest import BuildError

    try:
        return _COMMANDS[args.command](args, out, err)
    except CompileError as exc:
        err.write(f"clawc: error: {exc}\n")
    except BuildError as exc:
        err.write(f"clawc: error: {exc}\n")
    except OSError as exc:
        err.write(f"clawc: error: {exc.strerror or exc}: {exc.filename or ''}\n")
    except ModuleNotFoundError as exc:
        if exc.name not in _COMPILER_EXTRA_MODULES:
            return _internal_error(exc, err)
        # The wheel alone is the sidecar's run-time set; compiling needs the extra. The name
        # is not on PyPI: the extra is installed from the same wheel or checkout.
        err.write(
            f"clawc: error: clawc {args.command} needs {exc.name}, from the compiler extra: "
            "install clawpod again with [compiler], e.g. "
            "pip install 'dist/clawpod-VERSION-py3-none-any.whl[compiler]' "
            "(README.md, Installing without the repository)\n"
        )
    except Exception as exc:
        return _internal_error(exc, err)
    return EXIT_INVALID


if __name__ == "__main__":
    sys.exit(main())
