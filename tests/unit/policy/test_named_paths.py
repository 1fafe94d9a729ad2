"""Paths the user docs name in backticks exist: a moved or removed file cannot leave a doc pointing at nothing.

Markdown links are checked by test_docs_links.py; this covers the paths written as code (`tests/lab/test_faults.py`,
`data/models.yml`), which is how the README's "what is verified" table and the runbook name their evidence. A path
is read from the repository root, or from the doc's own directory (a role's README names `meta/argument_specs.yml`)."""

from __future__ import annotations

import re

import pytest
from testlib import REPO

TOPS = ("tests", "plugins", "roles", "playbooks", "data", "scripts", "benchmarks", "docs", "record", "inventories",
        "dashboards", "molecule", "changelogs", "meta")
NAMED = re.compile(r"`((?:" + "|".join(TOPS) + r")/[A-Za-z0-9_./@-]+?)(?:::[\w\[\]-]+)?`")
# Written by the tools, not kept in git: named in the docs as where to look once they have run.
GENERATED = {"inventories/lab/hosts.yml": "tests/lab/lab.py up writes it"}
DOCS = [REPO / "README.md", REPO / "tests" / "README.md", *sorted((REPO / "docs").glob("*.md")),
        *sorted((REPO / "roles").glob("*/README.md"))]


def named_paths(text: str) -> list[str]:
    """Repository paths in backticks, without placeholders (<version>, *, NAME)."""
    return [path.rstrip(".") for path in NAMED.findall(text)
            if not any(mark in path for mark in "<>*{}") and "NAME" not in path]


def test_the_scan_reads_paths_and_skips_placeholders():
    text = "see `tests/lab/test_faults.py::test_x`, `data/engines/<version>.yaml`, `roles/NAME/`, `docs/a.md.`"
    assert named_paths(text) == ["tests/lab/test_faults.py", "docs/a.md"]


def missing_paths(text: str, directory) -> list[str]:
    return [path for path in named_paths(text)
            if path not in GENERATED and not (REPO / path).exists() and not (directory / path).exists()]


def test_a_moved_file_is_found_missing():
    assert missing_paths("`tests/unit/test_self_heal.py` and `tests/unit/roles/test_self_heal.py`", REPO) == [
        "tests/unit/test_self_heal.py"]


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_every_path_a_doc_names_exists(doc):
    missing = missing_paths(doc.read_text(), doc.parent)
    assert missing == [], f"{doc.relative_to(REPO)} names paths that do not exist: {missing}"
