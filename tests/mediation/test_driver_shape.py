"""The mediated driver's shape (#23): it performs a command and sends the engine its event; the
journal is met in one module, the one that wraps performing model calls and tool rounds."""

from __future__ import annotations

from pathlib import Path

from tests.support.import_graph import imported_from as imports

SERVER = Path(__file__).resolve().parents[2] / "sidecar" / "server"
JOURNAL = "clawpod.sidecar.state.journal"
# Building the journal and typing the state that holds it is not calling it.
HOLDERS = {"app.py", "request/context.py"}


def imported_from(path: Path, module: str) -> set[str]:
    return {name for source, names in imports(path) if source == module for name in names}


def test_only_the_exactly_once_wrapper_meets_the_journal() -> None:
    callers = {
        inside: names
        for path in sorted(SERVER.rglob("*.py"))
        if (names := imported_from(path, JOURNAL))
        and (inside := path.relative_to(SERVER).as_posix()) not in HOLDERS
    }
    assert callers.keys() == {"mediated/exactly_once.py"}
    for holder in HOLDERS:
        assert imported_from(SERVER / holder, JOURNAL) <= {"RequestJournal"}


def test_the_driver_is_small() -> None:
    assert len((SERVER / "mediated" / "mediated.py").read_text().splitlines()) <= 150
