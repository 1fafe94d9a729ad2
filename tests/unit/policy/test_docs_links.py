"""The user docs and the engineering record link to what exists (issue 42).

Every relative Markdown link of the README, docs/ and record/ names a file or directory of the repository, and a link
with an anchor names a heading of its target; docs/README.md indexes every doc of docs/ and points at record/; the
shipped docs name the record where it is (record/, outside the tarball), never the docs/ paths it left.
"""

from __future__ import annotations

import re

import pytest
from unitlib import REPO

DOCS = sorted((REPO / "docs").glob("*.md"))
RECORD = sorted((REPO / "record").glob("*.md"))
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slugs(path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings (lower case, punctuation dropped, spaces as hyphens)."""
    headings = [line.lstrip("#").strip() for line in path.read_text().splitlines() if re.match(r"#{1,6} ", line)]
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def test_the_slugs_are_github_s():
    assert "1k-run-12-a-compiled-pd-pipeline-started-twice-with-its-compile-caches-kept-2026-12-06-one-h100" in slugs(
        REPO / "record" / "gpu-evidence.md")


@pytest.mark.parametrize("doc", [REPO / "README.md", *DOCS, *RECORD], ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_names_what_exists(doc):
    links = [target for target in LINK.findall(doc.read_text()) if not re.match(r"[a-z]+:", target)]
    for target in links:
        path, _sep, anchor = target.partition("#")
        destination = (doc.parent / path) if path else doc
        assert destination.exists(), f"{doc.relative_to(REPO)} links to {target}, which does not exist"
        if anchor and destination.suffix == ".md":
            assert anchor in slugs(destination), f"{doc.relative_to(REPO)} links to {target}: no such heading"


def test_the_docs_index_names_every_doc_and_the_record():
    index = (REPO / "docs" / "README.md").read_text()
    unlisted = [doc.name for doc in DOCS if doc.name != "README.md" and f"]({doc.name})" not in index]
    assert not unlisted, f"docs/README.md does not index {unlisted}"
    assert "](../record/README.md)" in index
    record = (REPO / "record" / "README.md").read_text()
    assert all(f"]({doc.name})" in record for doc in RECORD if doc.name != "README.md")


def test_the_shipped_docs_name_the_record_where_it_is():
    for doc in [REPO / "README.md", *DOCS]:
        text = doc.read_text()
        assert "docs/gpu-evidence.md" not in text and "docs/img/" not in text, doc.name
    assert not (REPO / "docs" / "gpu-evidence.md").exists() and not (REPO / "docs" / "img").exists()
    # docs/benchmarks.md is each benchmark's newest result for users; the session log is the record's.
    assert not re.search(r"\bstop \d+\b", (REPO / "docs" / "benchmarks.md").read_text())
