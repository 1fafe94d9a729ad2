"""The bench tool (roles/bench/files/vllm_omni_bench.py): statistics, vLLM result normalisation, the
built-in streaming client against a local SSE server, report, plots and compare."""

from __future__ import annotations

import importlib.util
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from unitlib import REPO

SPEC = importlib.util.spec_from_file_location("vllm_omni_bench", REPO / "roles" / "bench" / "files" / "vllm_omni_bench.py")
bench = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)

CELL = {"input_len": 64, "output_len": 8, "concurrency": 2, "num_prompts": 4}
META = {"deployment_id": "d1", "backend": "simulator", "simulator": True, "layout": "pd", "pipelines": 2, "gpus": 4,
        "harness": "builtin", "url": "https://10.77.0.11:8000", "model": "m", "started": "now"}


def test_percentiles_interpolate_like_numpy():
    assert bench.percentile([], 50) is None
    assert bench.percentile([5.0], 99) == 5.0
    assert bench.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert bench.percentile(list(map(float, range(101))), 99) == pytest.approx(99.0)


def test_cell_result_counts_failures_and_derives_tpot():
    samples = [{"ok": True, "ttft_s": 0.1, "itls_s": [0.01, 0.03], "e2e_s": 0.5, "output_tokens": 5, "input_tokens": 10,
                "error": ""},
               {"ok": False, "ttft_s": None, "itls_s": [], "e2e_s": 0.0, "output_tokens": 0, "error": "HTTP 401"}]
    row = bench.cell_result(CELL, samples, 2.0)
    assert (row["completed"], row["failed"], row["errors"]) == (1, 1, ["HTTP 401"])
    assert row["ttft_ms"]["p50"] == pytest.approx(100.0)
    assert row["itl_ms"]["p50"] == pytest.approx(20.0)
    assert row["tpot_ms"]["mean"] == pytest.approx(100.0)  # (0.5 - 0.1) / 4 tokens
    assert row["output_throughput"] == pytest.approx(2.5) and row["total_token_throughput"] == pytest.approx(7.5)


def test_vllm_bench_serve_results_normalise():
    result = {"completed": 3, "failed": 1, "duration": 2.0, "request_throughput": 1.5, "output_throughput": 12.0,
              "total_token_throughput": 99.0, "mean_ttft_ms": 120.0, "median_ttft_ms": 110.0, "p99_ttft_ms": 300.0,
              "p50_itl_ms": 9.0, "median_itl_ms": 9.5, "p99_itl_ms": 20.0, "errors": ["", "boom"]}
    row = bench.from_vllm(CELL, result)
    assert (row["completed"], row["failed"], row["errors"]) == (3, 1, ["boom"])
    assert row["ttft_ms"] == {"mean": 120.0, "p50": 110.0, "p99": 300.0}
    assert row["itl_ms"]["p50"] == 9.0  # an explicit p50 wins over the median
    assert row["tpot_ms"] == {"mean": None, "p50": None, "p99": None}


class _Sse(BaseHTTPRequestHandler):
    """A chat completions endpoint that streams 4 chunks 10 ms apart, and 401s a wrong key."""

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.headers.get("Authorization") != "Bearer sekret":
            self.send_response(401)
            self.end_headers()
            self.wfile.write(b"{}")
            return
        assert body["stream"] and body["max_tokens"] == 4
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for index in range(4):
            time.sleep(0.01)
            chunk = {"choices": [{"delta": {"content": f"t{index}"}}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        usage = {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 4}}
        self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())


@pytest.fixture
def sse_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sse)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_builtin_client_measures_a_stream(sse_url):
    cell = {"input_len": 16, "output_len": 4, "concurrency": 2, "num_prompts": 3}
    row = bench.run_cell(sse_url, "sekret", "m", cell, 10.0, None)
    assert (row["completed"], row["failed"]) == (3, 0)
    assert 5 <= row["ttft_ms"]["p50"] < 1000 and 5 <= row["itl_ms"]["p50"] < 1000
    assert row["output_throughput"] > 0 and row["total_token_throughput"] > row["output_throughput"]
    wrong = bench.run_cell(sse_url, "other", "m", {**cell, "num_prompts": 2}, 10.0, None)
    assert (wrong["completed"], wrong["failed"], wrong["errors"]) == (0, 2, ["HTTP 401"])


def test_client_command_reads_the_key_from_the_environment_only(sse_url, tmp_path, monkeypatch, capsys):
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"input_len": 8, "output_len": 4, "concurrency": 1, "num_prompts": 2}]))
    monkeypatch.setenv("OPENAI_API_KEY", "sekret")
    assert bench.main(["client", "--url", sse_url, "--grid", str(grid), "--out", str(tmp_path / "raw.json"),
                       "--model", "m"]) == 0
    raw = json.loads((tmp_path / "raw.json").read_text())
    assert raw["cells"][0]["completed"] == 2 and "sekret" not in (tmp_path / "raw.json").read_text()
    assert "sekret" not in capsys.readouterr().out


def _raw(scale: float = 1.0) -> dict:
    cells = []
    for concurrency in (1, 4):
        row = bench.cell_result({**CELL, "concurrency": concurrency}, [
            {"ok": True, "ttft_s": 0.1 * scale * concurrency, "itls_s": [0.01 * scale], "e2e_s": 0.3,
             "output_tokens": 8, "input_tokens": 64, "error": ""}] * 4, 1.0)
        cells.append(row)
    return {"harness": "builtin", "cells": cells}


def test_report_json_markdown_and_per_gpu_throughput(tmp_path):
    report = bench.build_report(_raw(), META)
    assert [r["concurrency"] for r in report["cells"]] == [1, 4]
    assert report["cells"][0]["output_throughput_per_gpu"] == pytest.approx(32.0 / 4)
    text = bench.report_markdown(report)
    assert "SIMULATOR" in text and "| 64 | 8 | 4 | 4 / 0 |" in text and "builtin" in text


def test_report_without_gpus_has_no_per_gpu_figure():
    assert bench.build_report(_raw(), {**META, "gpus": 0})["cells"][0]["output_throughput_per_gpu"] is None


def test_compare_lays_two_reports_side_by_side():
    a = bench.build_report(_raw(1.0), {**META, "label": "aggregated"})
    b = bench.build_report(_raw(2.0), {**META, "label": "pd"})
    text = bench.compare_markdown(a, b)
    assert "aggregated vs pd" in text
    assert "| 64 | 8 | 1 | TTFT p50 ms | 100.00 | 200.00 | 2.00 |" in text
    other = bench.build_report({"cells": [{**_raw()["cells"][0], "input_len": 1}]}, META)
    assert "no (ISL, OSL, concurrency) cell in common" in bench.compare_markdown(a, other)


def test_plots_are_pngs_where_matplotlib_is_there(tmp_path):
    pytest.importorskip("matplotlib")
    report = bench.write_report(_raw(), META, tmp_path / "r")
    assert sorted(report["meta"]["plots"]) == ["itl.png", "throughput.png", "throughput_per_gpu.png", "ttft.png"]
    for name in report["meta"]["plots"]:
        assert (tmp_path / "r" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![ttft.png](ttft.png)" in (tmp_path / "r" / "report.md").read_text()
    plots = bench.write_compare(report, bench.build_report(_raw(2.0), META), tmp_path / "c")
    assert "compare_ttft.png" in plots and (tmp_path / "c" / "compare.md").is_file()


def test_report_without_matplotlib_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "plot", lambda *a, **k: [])
    report = bench.write_report(_raw(), META, tmp_path)
    assert report["meta"]["plots"] == [] and "matplotlib" in report["meta"]["plots_note"]
    assert json.loads((tmp_path / "report.json").read_text())["schema"] == bench.SCHEMA


def test_grid_is_every_length_pair_at_every_concurrency():
    cells = bench.grid([256, 16], [8], [4, 1], prompts_min=8, prompts_per_concurrency=4)
    assert [(c["input_len"], c["concurrency"], c["num_prompts"]) for c in cells] == [
        (16, 1, 8), (16, 4, 16), (256, 1, 8), (256, 4, 16)]
    for bad in ([], [0], ["8"], [True]):
        with pytest.raises(ValueError, match="positive integers"):
            bench.grid([16], [8], bad, 1, 1)
