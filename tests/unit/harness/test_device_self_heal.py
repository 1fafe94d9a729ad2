"""record/gpu-evidence.md section 1n against the device runs it reports (tests/fixtures/device-h100-self-heal): each
number of its table is the recorded one, and the runs show what the section says (the head erred, its agent restarted
it, the pipeline answered in full again, judged), so neither can drift from the other."""

from __future__ import annotations

import json
import re

import pytest
from testlib import REPO

FIXTURES = REPO / "tests" / "fixtures" / "device-h100-self-heal"
RUNS = {"run 15": "run15-harness-stop", "run 16": "run16"}


def section() -> str:
    text = (REPO / "record" / "gpu-evidence.md").read_text()
    start = text.index("## 1n. Runs 15 and 16")
    return text[start:text.index("\n## ", start + 1)]


def fault(run: str) -> dict:
    return json.loads((FIXTURES / RUNS[run] / "results.json").read_text())["span"]["fault"]


def row(label: str) -> list[str]:
    """The two cells (run 15, run 16) of the table row that starts with ``label``."""
    found = re.search(rf"^\| {re.escape(label)}[^|]* \| ([^|]+) \| ([^|]+) \|$", section(), re.MULTILINE)
    assert found, f"the row {label!r} is gone"
    return [cell.strip().strip("*") for cell in found.groups()]


def first_503(events: dict) -> float:
    return next(at for at, status in events["health"] if status == 503)


@pytest.mark.parametrize("column, run", list(enumerate(RUNS)))
def test_each_number_in_the_table_is_the_recorded_one(column, run):
    events = fault(run)
    head, *rest = events["self_heal"]["restarts"]
    assert head["process"] == "head" and "HTTP 503" in head["why"]
    errored = sum(phase["outcomes"].get("http 500", 0) for phase in events["phases"])
    assert float(row("head's `/health` 503")[column]) == first_503(events)
    assert int(row("requests answered HTTP 500")[column]) == errored
    assert float(row("the head's agent restarts the head")[column]) == head["at_s"]
    assert float(row("the head started again")[column]) == head["started_s"]
    stage = row("the headless stage started again")[column]
    assert str(next(at for what, at in events["relaunches"] if what == "headless")) in stage
    for restart in rest:  # the stage's own agent restarted it (run 15 only)
        assert restart["process"] == "headless" and str(restart["started_s"]) in stage
    assert float(row("the stage registered with the new head")[column]) == events["registered_again_s"]
    assert float(row("first full answer")[column]) == events["first_ok_s"]
    assert events["first_ok_judged"]["ok"], events["first_ok_judged"]


def test_run_16_stopped_the_head_as_its_unit_does_and_run_15_did_not():
    bounded = fault("run 16")["self_heal"]["restarts"][0]["stop"]
    assert bounded["sigkill_because"] == "the HTTP server is done" and bounded["all_exited_s"] < 1
    assert f"stopped in {bounded['all_exited_s']} s" in section()
    assert "stop" not in fault("run 15")["self_heal"]["restarts"][0]  # the harness's old stop: the engine's join
    slow = fault("run 15")["self_heal"]["restarts"][0]
    assert slow["started_s"] - slow["at_s"] > 30


def test_nobody_acted_and_the_healed_pipeline_answered_prefill_to_decode():
    for run in RUNS:
        events = fault(run)
        assert events["kill"] == "main" and events["headless_returncode"] == -9
        assert "prefill handed the KV off and decode received it" in events["first_ok_judged"]["reason"]
        # Every restart in the record is a self-heal agent's or systemd's Restart=always: none is a person's.
        assert {what for what, _at in events["relaunches"]} <= {"headless", "head (self-heal)", "headless (self-heal)"}
