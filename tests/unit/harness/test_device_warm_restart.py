"""record/gpu-evidence.md section 1k against the device run it reports (tests/fixtures/device-h100-warm-restart):
the numbers the doc states are the recorded ones, so neither can drift from the other."""

from __future__ import annotations

import json
import re

from testlib import REPO

FIXTURE = REPO / "tests" / "fixtures" / "device-h100-warm-restart"


def section() -> str:
    text = (REPO / "record" / "gpu-evidence.md").read_text()
    start = text.index("## 1k. Run 12")
    return text[start:text.index("\n## ", start + 1)]


def test_the_doc_states_the_recorded_ready_times_and_answers():
    results = json.loads((FIXTURE / "results.json").read_text())
    row = re.search(r"\| start to `/health` 200 \(s\) \| ([\d.]+) \| ([\d.]+) \|", section())
    assert row, "the section's ready row is gone"
    assert (float(row.group(1)), float(row.group(2))) == (results["cold"]["ready"]["seconds"],
                                                          results["warm"]["ready"]["seconds"])
    for run in ("cold", "warm"):
        assert results[run]["ready"]["ready"] is True
        cells = [cell for cell in results[run]["summary"].values() if isinstance(cell, dict) and "requests" in cell]
        assert (sum(c["requests"] for c in cells), sum(c["ok"] for c in cells)) == (32, 32)
    assert "| 32 of 32 | 32 of 32 |" in section()


def test_the_doc_states_the_recorded_compile_times_and_the_cache_paths_are_the_plan_s():
    notes = (FIXTURE / "compile-cache.txt").read_text()
    for seconds in ("24.72", "15.71", "24.87", "15.67", "18.03", "8.45", "18.02", "8.93"):
        assert seconds in notes and seconds in section(), seconds
    golden = (REPO / "tests" / "golden" / "pd-2hosts" / "expected" / "gpu-1" / "omni0" / "engine.env").read_text()
    assert 'VLLM_CACHE_ROOT="/var/lib/vllm-omni/compile-cache/vllm-omni-0.26.0/vllm"' in golden
    assert "/var/lib/vllm-omni/compile-cache/vllm-omni-0.26.0/" in notes and "vllm/torch_compile_cache/" in notes


WATCH = REPO / "tests" / "fixtures" / "device-h200-aot-watch"


def test_run_13_states_what_its_watch_recorded():
    """Section 1l: both artifacts saved and kept after the engine stopped; the directory emptied when the harness began
    the next scenario; the ready times are the recorded ones."""
    text = (REPO / "record" / "gpu-evidence.md").read_text()
    start = text.index("## 1l. Run 13")
    doc = text[start:text.index("\n## ", start + 1)]
    results = json.loads((WATCH / "results.json").read_text())
    for run in ("cold", "warm"):
        assert f"ready after {results[run]['ready']['seconds']} s" in doc
    watch = (WATCH / "aot-watch.txt").read_text()
    assert "20:34:54.062  entries under torch_aot_compile: 0" in watch and "| 20:34:54 |" in doc
    assert watch.count("/rank_0_0/model 5174826 bytes") >= 2 and "5,174,826 bytes" in doc
    cold_end = re.search(r"cold end (\d\d:\d\d:\d\d)", watch).group(1)
    assert cold_end < "20:34:54", "the directory vanished before the first scenario ended"


KEPT = REPO / "tests" / "fixtures" / "device-h200-warm-restart-kept"


def test_run_14_states_its_recorded_ready_and_compile_times():
    """Section 1m: the ready times, compile times and answers in its table are run 14's recorded ones, and both warm
    starts loaded the saved artifacts."""
    text = (REPO / "record" / "gpu-evidence.md").read_text()
    start = text.index("## 1m. Run 14")
    doc = text[start:text.index("\n## ", start + 1)]
    results = json.loads((KEPT / "results.json").read_text())
    ready = [results[run]["ready"]["seconds"] for run in ("cold", "warm", "warm2")]
    assert all(results[run]["ready"]["ready"] for run in ("cold", "warm", "warm2"))
    assert "| start to `/health` 200 (s) | {} | {} | {} |".format(*ready) in doc
    for run in ("cold", "warm", "warm2"):
        cells = [c for c in results[run]["summary"].values() if isinstance(c, dict) and "requests" in c]
        assert (sum(c["requests"] for c in cells), sum(c["ok"] for c in cells)) == (32, 32), run
    lines = (KEPT / "phase-lines.txt").read_text() + (KEPT / "warm2-timeline.txt").read_text()
    compiled = re.findall(r"torch\.compile took ([\d.]+) s", lines)
    assert compiled == ["24.79", "15.92", "2.57", "2.60", "2.97", "3.39"], compiled
    assert "| stage 0: torch.compile (s) | 24.79 | 2.57 | 2.97 |" in doc
    assert "| stage 1: torch.compile (s) | 15.92 | 2.60 | 3.39 |" in doc
    assert lines.count("Directly load AOT compilation") == 4  # both stages, both warm starts
    assert "initialized in 77.30 seconds" in lines and "77.30" in doc
    assert f"{round(100 * ready[1] / ready[0])} % and {round(100 * ready[2] / ready[0])} %" in doc
