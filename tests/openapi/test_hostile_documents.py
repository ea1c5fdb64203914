"""Documents written to hurt (SPEC §25): each gives one clear error, in a process whose peak
memory stays bounded (measured from outside, by the kernel's count of the child's RSS)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.openapi.documents import (
    document,
    fan_out,
    many_operations,
    post_with_body,
    ref_chain,
    write,
    write_padded,
)
from tests.openapi.importing import run_import, run_import_measured

# `clawc import openapi` of the 3 KB Petstore peaks near 55 MiB here; a hostile document may
# cost a little more, never a multiple of its size.
MAX_RSS_MIB = 200


def test_a_50_mb_document_is_refused_before_it_is_read(tmp_path: Path) -> None:
    big = write_padded(tmp_path / "big.json", 50 * 1024 * 1024)
    run = run_import_measured(big, "--service", "big")
    assert run.code == 1
    assert "the document is 52,428,800 bytes; at most 16,777,216 are read" in run.err
    assert run.max_rss_mib < MAX_RSS_MIB


def test_10000_operations_are_refused_before_validation(tmp_path: Path) -> None:
    run = run_import_measured(
        write(tmp_path / "ops.json", many_operations(10_000)), "--service", "x"
    )
    assert run.code == 1
    assert "/paths: the document has 10,000 operations; at most 5,000 are imported" in run.err
    assert run.max_rss_mib < MAX_RSS_MIB


@pytest.mark.parametrize("length", [2, 1000])
def test_a_ref_cycle_is_refused_with_a_clear_error(tmp_path: Path, length: int) -> None:
    source = write(tmp_path / "cycle.json", ref_chain(length, cycle=True))
    run = run_import_measured(source, "--service", "x")
    assert run.code == 1
    if length == 2:
        expected = "recursive schema: $ref cycle #/components/schemas/S0 -> "
    else:  # the validator follows refs too: it stops first
        expected = "the document's $refs or nesting go too deep to validate"
    assert expected in run.err
    assert run.max_rss_mib < MAX_RSS_MIB


def test_refs_nested_past_the_bound_skip_the_operation(tmp_path: Path) -> None:
    run = run_import(write(tmp_path / "chain.json", ref_chain(80, cycle=False)), "--service", "x")
    assert run.code == 1
    assert "(POST /items (create): $refs nested deeper than 64)" in run.err


def test_refs_that_fan_out_exponentially_stop_at_the_node_budget(tmp_path: Path) -> None:
    run = run_import_measured(write(tmp_path / "fan.json", fan_out(30)), "--service", "x")
    assert run.code == 1
    assert "its schema is larger than 20,000 nodes once its $refs are inlined" in run.err
    assert run.max_rss_mib < MAX_RSS_MIB


def test_a_cycle_skips_only_its_operation(tmp_path: Path) -> None:
    data = ref_chain(2, cycle=True)
    data["paths"]["/health"] = {"get": {"operationId": "health", "responses": {"200": {}}}}
    data["paths"]["/health"]["get"]["responses"]["200"]["description"] = "ok"
    run = run_import(write(tmp_path / "mixed.json", data), "--service", "x")
    assert run.code == 0, run.err
    assert [t["name"] for t in yaml.safe_load(run.out)["tools"]] == ["health"]
    assert "#   POST /items (create): recursive schema: $ref cycle" in run.out


def test_names_that_collide_after_normalisation_are_an_error(tmp_path: Path) -> None:
    paths = {
        "/a": post_with_body("#/components/schemas/A", "get pet"),
        "/b": post_with_body("#/components/schemas/A", "get_pet"),
    }
    data = document(paths, {"A": {"type": "object", "properties": {}}})
    run = run_import(write(tmp_path / "names.json", data), "--service", "x")
    assert run.code == 1
    assert "/paths/~1b/post: operations POST /a (get pet) and POST /b (get_pet) both " in run.err
    assert "become tool 'get_pet'; give one an x-claw: {name: ...}" in run.err


def test_a_ref_to_another_file_or_url_is_never_followed(tmp_path: Path) -> None:
    data = document({"/items": post_with_body("https://example.invalid/schemas.json#/A")})
    run = run_import(write(tmp_path / "remote.json", data), "--service", "x")
    assert run.code == 1
    assert "points outside the document; bundle the document into one file first" in run.err


@pytest.mark.parametrize("suffix", ["json", "yaml"])
def test_a_document_nested_100000_deep_is_refused(tmp_path: Path, suffix: str) -> None:
    deep = tmp_path / f"deep.{suffix}"
    deep.write_text('{"openapi": "3.0.3", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    run = run_import_measured(deep, "--service", "x")
    assert run.code == 1
    assert "the document is nested too deeply" in run.err
    assert run.max_rss_mib < MAX_RSS_MIB
