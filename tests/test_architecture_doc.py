"""docs/architecture.md names every module of the two programs, so the page cannot drift from
the tree: by its path inside its program's folder (``server/mediated/mediated.py``), or by its
file name alone where no other module has that name."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ("sidecar", "compiler", "cli")
DOC = (ROOT / "docs" / "architecture.md").read_text()


def modules() -> list[Path]:
    return [
        path.relative_to(ROOT)
        for program in PROGRAMS
        if (ROOT / program).is_dir()
        for path in sorted((ROOT / program).rglob("*.py"))
        if path.name != "__init__.py"
    ]


def named(path: Path, file_names: Counter[str]) -> bool:
    inside = path.relative_to(path.parts[0]).as_posix()
    forms = [path.as_posix(), inside] + ([path.name] if file_names[path.name] == 1 else [])
    return any(re.search(rf"(?<![\w/.-]){re.escape(form)}\b", DOC) for form in forms)


def test_architecture_names_every_module() -> None:
    found = modules()
    file_names = Counter(path.name for path in found)
    unnamed = [str(path) for path in found if not named(path, file_names)]
    assert len(found) > 100
    assert not unnamed, f"docs/architecture.md does not name: {unnamed}"
