"""The README's "What is verified, and where" table cannot go stale: scripts/gen_docs.py writes it from
data/verified.yml, where a measured number is never typed but read from a committed result (scripts/verified_table.py).

Every fact resolves and is used, every {name} has a fact, no evidence text types a measured-looking number, the
README holds exactly what the data and the results give, and a result that changes changes the table.
"""

from __future__ import annotations

import importlib.util
import json
import re

import pytest
from unitlib import REPO

BEGIN, END = "<!-- BEGIN GENERATED: verified -->", "<!-- END GENERATED: verified -->"


@pytest.fixture
def table():
    spec = importlib.util.spec_from_file_location("verified_table_under_test", REPO / "scripts" / "verified_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_table_is_the_data_with_the_committed_results(table):
    readme = (REPO / "README.md").read_text()
    assert readme.count(BEGIN) == 1 and readme.count(END) == 1
    generated = readme.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert generated == table.verified_md(), "README.md's verified table is out of date: run `make docs`"


def test_every_fact_resolves_and_every_name_has_one_and_is_used(table):
    for row in table.rows():
        table.row_evidence(row)  # raises FactError naming the row and the fact
        facts = row.get("facts") or {}
        used = set(table.placeholders(row["evidence"])) | {name for spec in facts.values() for name in spec.get("ratio", [])}
        assert set(facts) == used, f"{row['claim']}: facts not used: {sorted(set(facts) - used)}"
        for spec in facts.values():
            assert "ratio" in spec or spec["file"].startswith(("tests/fixtures/", "record/")), spec


def test_no_evidence_text_types_a_measured_number(table):
    for row in table.rows():
        typed = [m.group(0) for m in table.MEASURED.finditer(row["evidence"])]
        assert not typed, f"{row['claim']}: {typed} typed into data/verified.yml; read them from a result (facts)"
    # The guard itself: these would be caught, a version, a GPU count or a request parameter would not.
    caught = "32 of 32 requests, ready 124 s, TTFT 227 ms, aggregated 1.37x the throughput"
    assert [m.group(0) for m in table.MEASURED.finditer(caught)] == ["32 of 32", "124 s", "227 ms", "1.37x"]
    assert not table.MEASURED.search("vLLM 0.26.0 on a 2x H200 machine, `max_tokens` 1, 7, 64, HTTP 400")


def test_a_result_that_changes_changes_the_table(table, tmp_path, monkeypatch):
    result = tmp_path / "tests" / "fixtures" / "run" / "results.json"
    result.parent.mkdir(parents=True)
    monkeypatch.setattr(table, "REPO", tmp_path)
    row = {"claim": "probe", "evidence": "{ok} of {sent} requests, ready {ready} s, {ratio}x",
           "facts": {"ok": {"file": "tests/fixtures/run/results.json", "path": "pd.requests", "op": "count_ok"},
                     "sent": {"file": "tests/fixtures/run/results.json", "path": "pd.requests", "op": "len"},
                     "ready": {"file": "tests/fixtures/run/results.json", "paths": ["a.s", "b.s"], "op": "max", "digits": 0},
                     "ratio": {"ratio": ["ok", "sent"], "digits": 2}}}
    for statuses, expected in (([200, 200, 500], "2 of 3 requests, ready 136 s, 0.67x"),
                               ([200, 200, 200], "3 of 3 requests, ready 136 s, 1.00x")):
        result.write_text(json.dumps({"pd": {"requests": [{"status": s} for s in statuses]},
                                      "a": {"s": 124.1}, "b": {"s": 136.1}}))
        table._json.cache_clear()
        assert table.row_evidence(row) == expected


def test_a_fact_that_does_not_resolve_names_the_row_and_the_fact(table):
    row = {"claim": "probe", "evidence": "{gone} of 3",
           "facts": {"gone": {"file": "tests/fixtures/device-h100-030/pd-text/results.json", "path": "pd-text.no_such"}}}
    with pytest.raises(table.FactError, match=re.escape("row 'probe', fact gone")):
        table.row_evidence(row)
    with pytest.raises(table.FactError, match="no fact for missing"):
        table.row_evidence({"claim": "probe", "evidence": "{missing} s", "facts": {}})
