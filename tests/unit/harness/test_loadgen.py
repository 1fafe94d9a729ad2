"""benchmarks/loadgen.py, the lab's load generator: bounded by count, time and (with --rate) pace, against a real
HTTP server on loopback."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest
from unitlib import REPO

LOADGEN = REPO / "benchmarks" / "loadgen.py"
_spec = importlib.util.spec_from_file_location("loadgen", LOADGEN)
loadgen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(loadgen)


class _Answer(BaseHTTPRequestHandler):
    delay = 0.0
    started: ClassVar[list[float]] = []

    def do_POST(self):
        self.started.append(time.monotonic())
        self.rfile.read(int(self.headers["Content-Length"]))
        time.sleep(self.delay)
        body = json.dumps({"choices": [{"message": {"content": "hello"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    _Answer.started = []
    _Answer.delay = 0.0
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", _Answer
    httpd.shutdown()


def test_a_paced_run_starts_no_more_requests_than_its_rate_allows(server):
    url, answer = server
    before = time.monotonic()
    report = loadgen.run(url, 1000, 4, None, "m", 4, max_seconds=1.5, rate=10)
    assert report["failed"] == 0 and report["ok"] == report["sent"]
    # Slots at 0, 0.1, ... 1.4 s: 15 in the 1.5 s, none after the deadline (fewer only on a machine too busy to
    # claim them in time).
    assert 10 <= report["sent"] <= 15, report
    # The n-th request (from 0) started no earlier than n / rate after the run began, although 4 workers were free.
    late_enough = [start - before >= n / 10 for n, start in enumerate(sorted(answer.started))]
    assert all(late_enough), [round(start - before, 3) for start in sorted(answer.started)]


def test_an_unpaced_run_is_bounded_by_its_count(server):
    url, _answer = server
    report = loadgen.run(url, 25, 4, None, "m", 4, max_seconds=30)
    assert (report["sent"], report["ok"], report["failed"]) == (25, 25, 0), report


def test_slots_missed_while_requests_hang_start_together_at_most_concurrency_at_once(server):
    url, answer = server
    answer.delay = 0.6  # each request takes longer than 2 slots at 5/s
    report = loadgen.run(url, 1000, 2, None, "m", 4, max_seconds=2.0, rate=5)
    assert report["failed"] == 0
    # Two workers, 0.6 s each: about 3 rounds of 2 in 2 s, not the 10 slots the rate alone would allow.
    assert 4 <= report["sent"] <= 8, report


@pytest.mark.parametrize("flags, says", [
    (["--rate", "0"], "rate 0.1-10000"),
    (["--concurrency", "65"], "concurrency 1-64"),
])
def test_out_of_range_bounds_are_refused(flags, says):
    done = subprocess.run([sys.executable, str(LOADGEN), "http://127.0.0.1:9", *flags], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 1 and says in done.stderr, done.stderr


def test_a_target_outside_the_lab_and_loopback_is_refused():
    done = subprocess.run([sys.executable, str(LOADGEN), "http://192.0.2.1:8000", "--requests", "1"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 1 and "outside the lab bridge" in done.stderr, done.stderr
