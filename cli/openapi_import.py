"""``clawc import openapi DOC --service NAME``: a descriptor from an OpenAPI document
(docs/openapi-import.md)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from ..compiler.errors import CompileError, display_path

IMPORT_HELP = """\
examples:
  clawc import openapi petstore.yaml --service petstore -o descriptors/petstore.yaml
  clawc import openapi api.json --service billing --include 'GET *' --exclude 'delete*'
  clawc import openapi api.yaml --service billing --effect 'createInvoice=additive'
  clawc import openapi --context ./billing docs/openapi.yaml --service billing

One tool per operation (name from operationId, else method and path); parameters and
the JSON request body become the input schema, $refs inlined. Effects follow the method
(GET read-only; PUT, DELETE idempotent and destructive; POST, PATCH destructive) unless
--effect or the operation's x-claw: {effect: ...} says otherwise. Auth comes from the
document's securitySchemes, as the NAME of the variable holding the secret.
What a descriptor cannot send is named in the output and skipped, never guessed.
Writing over an existing FILE shows the diff; it is replaced only when nothing but
comments changed, or with --overwrite.
"""

EFFECT_CHOICES = ("read-only", "idempotent", "additive", "destructive")


def add_import_parser(commands: Any, formatter: type[argparse.HelpFormatter]) -> None:
    command = commands.add_parser(
        "import",
        help="write a descriptor from a service's OpenAPI document",
        formatter_class=formatter,
    )
    kinds = command.add_subparsers(
        dest="kind", metavar="KIND", required=True, help="the kind of document: openapi"
    )
    openapi = kinds.add_parser(
        "openapi",
        help="OpenAPI 3.0/3.1 (or Swagger 2.0), YAML or JSON",
        epilog=IMPORT_HELP,
        formatter_class=formatter,
    )
    openapi.add_argument(
        "document",
        type=Path,
        metavar="DOC",
        help="the OpenAPI document: a file, or with --context a path inside DIR",
    )
    openapi.add_argument(
        "--context",
        type=Path,
        metavar="DIR",
        help="a build context (a service's build: directory): DOC is a path relative to it "
        "and may not leave it (no absolute path, no '..' out, no symlink out)",
    )
    openapi.add_argument(
        "--service", required=True, metavar="NAME", help="the service's name in the pod"
    )
    openapi.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="PATTERN",
        help="only operations whose tool name, operationId or 'METHOD /path' matches this glob "
        "(repeatable)",
    )
    openapi.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="PATTERN",
        help="leave out operations matching this glob (repeatable)",
    )
    openapi.add_argument(
        "--effect",
        action="append",
        default=[],
        metavar="PATTERN=EFFECT",
        help=f"the effect of matching operations: {', '.join(EFFECT_CHOICES)} (repeatable)",
    )
    openapi.add_argument(
        "--auth-env",
        metavar="VAR",
        help="the variable holding the service credential (default: NAME_TOKEN, NAME_API_KEY "
        "or NAME_CREDENTIALS)",
    )
    openapi.add_argument(
        "-o", "--out", type=Path, metavar="FILE", help="descriptor file (.yaml or .json)"
    )
    openapi.add_argument(
        "--overwrite",
        action="store_true",
        help="replace FILE even when the import changes what it says",
    )


def _effects(values: list[str]) -> tuple[tuple[str, str], ...]:
    effects = []
    for value in values:
        pattern, _, effect = value.rpartition("=")
        if not pattern or effect not in EFFECT_CHOICES:
            raise CompileError(
                f"--effect {value!r}: expected PATTERN=EFFECT, EFFECT one of "
                + ", ".join(EFFECT_CHOICES)
            )
        effects.append((pattern, effect))
    return tuple(effects)


def import_command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ..compiler.openapi.document import locate_in_context, read_document
    from ..compiler.openapi.operations import ImportOptions, import_operations
    from ..compiler.openapi.output import render, summary_lines, write_descriptor
    from ..compiler.pod_file.reserved import ENV_NAME

    if args.auth_env is not None and not ENV_NAME.match(args.auth_env):
        raise CompileError(f"--auth-env {args.auth_env!r} is not a valid variable name")
    options = ImportOptions(
        service=args.service,
        include=tuple(args.include),
        exclude=tuple(args.exclude),
        effects=_effects(args.effect),
        auth_env=args.auth_env,
    )
    path = args.document
    if args.context is not None:
        path = locate_in_context(args.context, str(args.document))
    document = read_document(path)
    for warning in document.warnings:
        err.write(f"clawc: warning: {warning}\n")
    imported = import_operations(document, options)
    if not imported.tools:
        reasons = "; ".join(f"{s.operation.label}: {s.reason}" for s in imported.skipped[:5])
        raise CompileError(
            "no operation could be imported" + (f" ({reasons})" if reasons else ""),
            file=path,
        )
    json_output = args.out is not None and args.out.suffix.lower() == ".json"
    text = render(imported, json_output)
    for line in summary_lines(imported):
        err.write(f"clawc: note: {line}\n")
    if args.out is None:
        out.write(text)
        return 0
    result = write_descriptor(text, args.out, args.overwrite)
    shown = display_path(args.out)
    counts = f"{len(imported.tools)} tool(s), {len(imported.skipped)} operation(s) skipped"
    if result.diff and not result.written:
        out.write(result.diff)
        err.write(
            f"clawc: error: {shown} says something else than this import (the diff above); "
            "kept as it is: rerun with --overwrite to replace it\n"
        )
        return 1
    if result.diff:
        out.write(result.diff)
    state = "unchanged" if not result.written else "wrote"
    if result.written and result.diff and result.same_meaning:
        state = "rewrote (comments only)"
    out.write(f"{state} {shown}: {counts}\n")
    return 0
