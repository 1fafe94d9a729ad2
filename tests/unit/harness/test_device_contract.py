"""A rehearsal of the device's contract run (tests/device/contract.py) without a GPU.

The stand-in engine (tests/fixtures/fake_engine) answers as the real one does with the collection's engine plugin:
as many tokens as asked, the stage default when none is asked, the same answer for the same prompt when greedy and
for the same seed when sampled, HTTP 400 for several choices and a temperature over 2. The script must lay out and
start both renders, judge every check and compare their greedy answers; a stand-in that answers otherwise must
show up as a FAIL, never as a pass.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from devicelib import stand_in_device
from testlib import REPO

SCRIPT = REPO / "tests" / "device" / "contract.py"


def run_contract(tmp, scenarios: list[str], env: dict) -> dict:
    out = tmp / f"out-{len(list(tmp.glob('out-*')))}"
    run = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--ready-timeout", "60", *scenarios],
                         env=env, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads((out / "results.json").read_text())


@pytest.fixture(scope="module")
def contract(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("contract")
    _plan, pd_render, env = stand_in_device(tmp, "contract-pd")
    _plan, aggregated_render, _env = stand_in_device(tmp, "contract-agg", inventory="aggregated-text")
    return tmp, env, run_contract(tmp, [f"pd={pd_render}", f"aggregated={aggregated_render}"], env)


def test_every_check_passes_on_an_engine_that_keeps_the_contract(contract):
    _tmp, _env, results = contract
    assert results["skipped"] == []
    for name in ("pd", "aggregated"):
        assert results[name]["ready"]["ready"] is True
        verdicts = results[name]["contract"]["verdicts"]
        assert verdicts and all(ok for _verdict, ok in verdicts), verdicts
    assert "PD: 71 of 71 went prefill -> KV transfer -> decode" in [v for v, _ok in results["pd"]["contract"]["verdicts"]]
    assert results["pd"]["contract"]["lengths"]["stage_default"]["expected"] == 32  # the render's decode default
    assert results["pd"]["engine_plugin"]["fixes"] == ["request_sampling_reaches_answer_stage"]
    assert results["compared"]["pd vs aggregated, sampled"]["equal"] == 32
    assert all(line.startswith(("pd: PASS", "aggregated: PASS", "pd vs aggregated, "))
               for line in results["verdicts"])


def test_an_engine_that_ignores_the_client_fails_the_checks(contract, monkeypatch):
    """The stand-in told to drop max_tokens, seeds and refusals (as stock vLLM-Omni PD decode does): FAILs."""
    tmp, env, _results = contract
    _plan, render, _env = stand_in_device(tmp, "contract-stock")
    results = run_contract(tmp, [f"stock={render}"], {**env, "FAKE_ENGINE_IGNORE_REQUEST": "1"})
    failed = [verdict for verdict, ok in results["stock"]["contract"]["verdicts"] if not ok]
    assert "chat max_tokens 7 -> 32 tokens" in failed and "n_2: HTTP 200" in failed
    assert "seeds 1 and 2: different answers" in failed
    assert results["compared"] == {}


def test_budget_skips_what_would_not_fit_and_says_so(contract):
    tmp, env, _results = contract
    _plan, render, _env = stand_in_device(tmp, "contract-budget")
    results = run_contract(tmp, ["--budget", "100", f"late={render}"], env)
    assert "late" not in results and results["skipped"][0].startswith("late: ")


def test_the_bench_grid_runs_on_each_pipeline_the_contract_started(contract):
    """--bench-spec: one start serves the contract and the bench harness's grid; the grids' files come back packed,
    each with the report the bench tool compares back on the controller."""
    tmp, env, _results = contract
    _plan, render, _env = stand_in_device(tmp, "contract-bench")
    spec = {"input_lens": [16], "output_lens": [4], "concurrency": [1, 2], "prompts_min": 2, "prompts_per_concurrency": 1}
    out = tmp / "out-bench"
    plan = json.loads((render / "plan.json").read_text())
    cache = Path(plan["backend"]["compile_cache"])
    (cache / "triton").mkdir(parents=True, exist_ok=True)
    (cache / "triton" / "kernel.cubin").write_text("compiled by the previous start")
    run = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--ready-timeout", "60", "--keep-compile-cache",
                          "--bench-spec", json.dumps(spec), f"pd={render}"], env=env, capture_output=True, text=True,
                         timeout=600, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    # --keep-compile-cache: the start found what the previous one compiled (the rest of the engine home emptied).
    assert results["pd"]["compile_cache_kept"] is True and (cache / "triton" / "kernel.cubin").is_file()
    assert all(ok for _verdict, ok in results["pd"]["contract"]["verdicts"])
    assert [(c["concurrency"], c["completed"], c["failed"]) for c in results["pd"]["report"]] == [(1, 2, 0), (2, 2, 0)]
    assert sorted(p.name for p in out.iterdir()) == ["bench-files.tar.gz", "logs.tar.gz", "results.json"]
    with tarfile.open(out / "bench-files.tar.gz") as archive:
        names = {name.removeprefix("./") for name in archive.getnames()}
    assert {"pd/report.json", "pd/raw.json", "pd/grid.json"} <= names
    # Too little budget left for the grid after the contract: skipped and said so, the contract kept.
    late = run_contract(tmp, ["--budget", "232", "--bench-spec", json.dumps({**spec, "prompts_min": 100_000}),
                              f"late={render}"], env)
    assert late["late"]["contract"] and late["late"]["bench_skipped"].startswith("about ")


FIXTURE = REPO / "tests" / "fixtures" / "device-h100-contract"


@pytest.mark.parametrize("run, pipelines", [("results.json", ("pd-text", "aggregated-text")),
                                            ("nixl/results.json", ("pd-text-nixl",))])
def test_the_committed_gpu_runs_say_what_docs_gpu_evidence_says(run, pipelines):
    """record/gpu-evidence.md (run 11) quotes these: a fixture replaced by a run that says otherwise fails here.

    The NIXL run came first, with /v1/completions still judged as a length check: vLLM-Omni refused it for
    Qwen3-Omni (HTTP 400), its one FAIL, after which the script records that endpoint instead of judging it."""
    results = json.loads((FIXTURE / run).read_text())
    assert results["machine"].startswith("NVIDIA H100")
    for name in pipelines:
        contract = results[name]["contract"]
        completions = contract.get("completions") or contract["lengths"]["completions_7"]
        assert completions["status"] == 400 and "requires chat template structure" in completions["error"]
        verdicts = [(verdict, ok) for verdict, ok in contract["verdicts"] if not verdict.startswith("completions")]
        assert len(verdicts) >= 9 and all(ok for _verdict, ok in verdicts), [v for v, ok in verdicts if not ok]
        assert results[name]["engine_plugin"]["fixes"] == ["request_sampling_reaches_answer_stage"]
    if len(pipelines) == 2:
        sampled = results["compared"]["pd-text vs aggregated-text, sampled"]
        assert (sampled["equal"], sampled["prompts"], sampled["distinct_answers"]) == (32, 32, [32, 32])
        assert results["pd-text"]["contract"]["through_prefill_and_decode"] == {"requests": 71, "ok": 71}


FIXTURE_030 = REPO / "tests" / "fixtures" / "device-h100-030"


def test_the_030_gpu_run_says_what_record_gpu_evidence_says():
    """record/gpu-evidence.md (run 17) quotes these: vLLM-Omni 0.30.0 PD over Mooncake and NIXL on an H100, every
    contract check but temperature 3 (HTTP 500 with plugin revision 2, the reason for revision 3), the two
    transports' sampled answers equal, the first start stopped by the missing av module, the aggregated start
    not finished in its 320 s."""
    pd = json.loads((FIXTURE_030 / "pd-text" / "results.json").read_text())
    nixl = json.loads((FIXTURE_030 / "pd-text-nixl" / "results.json").read_text())
    for results, name, ready in ((pd, "pd-text", 284.2), (nixl, "pd-text-nixl", 274.2)):
        record = results[name]
        assert results["machine"].startswith("NVIDIA H100") and record["ready"] == {"ready": True, "seconds": ready}
        assert record["engine_plugin"]["revision"] == 2
        assert record["engine_plugin"]["fixes"] == ["qwen3_omni_pd_pipelines", "request_sampling_reaches_answer_stage"]
        failed = [verdict for verdict, ok in record["contract"]["verdicts"] if not ok]
        assert failed == ["temperature_3: HTTP 500"]
        assert record["contract"]["through_prefill_and_decode"] == {"requests": 71, "ok": 71}
    pairs = harness_compare({"pd-text": pd["pd-text"], "pd-text-nixl": nixl["pd-text-nixl"]})
    # The committed comparison (which the README's verified table reads) is the one the results give.
    assert json.loads((FIXTURE_030 / "compared.json").read_text())["compared"] == pairs
    sampled = pairs["pd-text vs pd-text-nixl, sampled"]
    assert (sampled["equal"], sampled["prompts"], sampled["distinct_answers"]) == (32, 32, [32, 32])
    cells = [(c["concurrency"], c["completed"], c["failed"]) for c in pd["pd-text"]["report"]]
    assert cells == [(1, 8, 0), (4, 8, 0), (8, 16, 0)]
    assert round(pd["pd-text"]["report"][0]["ttft_ms"]["p50"]) == 227 and round(pd["pd-text"]["report"][0]["itl_ms"]["p50"]) == 47
    first = json.loads((FIXTURE_030 / "first-start" / "results.json").read_text())["pd-text"]
    assert first["ready"]["why"] == "exited with 1"
    assert any("No module named 'av'" in line for line in first["failure_lines"])
    aggregated = json.loads((FIXTURE_030 / "aggregated-text" / "results.json").read_text())["aggregated-text"]
    assert aggregated["ready"] == {"ready": False, "why": "no /health 200 within 320s", "seconds": 320.0}


def test_the_run_18_results_say_what_record_gpu_evidence_says():
    """record/gpu-evidence.md 1p (run 18) quotes these: plugin revision 3 on an H100, every contract check passing
    (temperature 3 now HTTP 400), then the same render started again on the caches the first start left."""
    run = FIXTURE_030.parent / "device-h100-030-run18"
    cold = json.loads((run / "contract" / "results.json").read_text())
    warm = json.loads((run / "warm-restart" / "results.json").read_text())
    record = cold["pd-text"]
    assert cold["machine"].startswith("NVIDIA H100") and warm["machine"].startswith("NVIDIA H100")
    assert record["engine_plugin"]["revision"] == 3 and record["compile_cache_kept"] is False
    assert all(ok for _verdict, ok in record["contract"]["verdicts"]) and len(record["contract"]["verdicts"]) == 11
    assert ["temperature_3: HTTP 400", True] in record["contract"]["verdicts"]
    assert record["contract"]["through_prefill_and_decode"] == {"requests": 71, "ok": 71}
    assert record["ready"] == {"ready": True, "seconds": 256.1} and warm["pd-text"]["ready"] == {"ready": True, "seconds": 136.1}
    assert round(136.1 / 256.1, 2) == 0.53  # the record's "53 % of the cold start"
    summary = warm["pd-text"]["summary"]
    assert sum(cell["ok"] for cell in summary.values()) == 32 and not any(cell["failed"] for cell in summary.values())


def test_the_run_19_results_say_what_record_gpu_evidence_says():
    """record/gpu-evidence.md 1q (run 19) quotes these: vLLM-Omni 0.30.0 aggregated on an H100 (its first start to
    ready on a GPU) and, on the compile cache that start left, the Mooncake and the NIXL PD; every contract check
    passing on all three, their answers compared prompt by prompt, and one bench spec on the aggregated and the PD."""
    run = FIXTURE_030.parent / "device-h100-030-run19"
    results = {name: json.loads((run / folder / "results.json").read_text())
               for folder, name in (("aggregated", "aggregated-text"), ("pd-text", "pd-text"),
                                    ("pd-text-nixl", "pd-text-nixl"))}
    records = {name: result[name] for name, result in results.items()}
    for name, record in records.items():
        assert results[name]["machine"].startswith("NVIDIA H100") and record["engine_plugin"]["revision"] == 3
        verdicts = record["contract"]["verdicts"]
        assert all(ok for _verdict, ok in verdicts) and len(verdicts) == (10 if name == "aggregated-text" else 11)
        assert ["temperature_3: HTTP 400", True] in verdicts and record["compile_cache_kept"] is True
    assert [records[name]["ready"]["seconds"] for name in records] == [296.1, 84.0, 86.1]
    for name in ("pd-text", "pd-text-nixl"):
        assert records[name]["contract"]["through_prefill_and_decode"] == {"requests": 71, "ok": 71}
    pairs = harness_compare(records)
    assert json.loads((run / "compared.json").read_text())["compared"] == pairs
    for pair, compared in pairs.items():
        distinct = [1, 1] if pair.endswith("greedy") else [32, 32]
        assert (compared["equal"], compared["prompts"], compared["distinct_answers"]) == (32, 32, distinct), pair
    cells = {name: [(c["concurrency"], c["completed"], c["failed"], round(c["ttft_ms"]["p50"]), round(c["itl_ms"]["p50"]))
                    for c in records[name]["report"]] for name in ("aggregated-text", "pd-text")}
    assert cells == {"aggregated-text": [(1, 8, 0, 71, 29), (4, 8, 0, 476, 30), (8, 16, 0, 123, 31)],
                     "pd-text": [(1, 8, 0, 139, 26), (4, 8, 0, 243, 29), (8, 16, 0, 327, 29)]}
    assert "| 512 | 32 | 4 | output tok/s | 94.16 | 112.11 | 1.19 |" in (run / "pd-vs-aggregated.md").read_text()


def harness_compare(results: dict) -> dict:
    """contract.py's own prompt-by-prompt comparison, over pipelines that served in different calls."""
    spec = importlib.util.spec_from_file_location("contract_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return module.compare(results, list(results))
