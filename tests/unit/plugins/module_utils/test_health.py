"""health_wait's one look: each target's answer over real HTTP, the journal only for those not healthy."""

from __future__ import annotations

import http.server
import socket
import threading

import pytest

from ansible_collections.vllm_omni.serve.plugins.module_utils import _health


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # http.server's name
        self.send_response(200 if self.path == "/health" else 503)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_each_target_is_asked_once_and_only_the_unhealthy_get_their_journal(server, monkeypatch):
    asked = []
    monkeypatch.setattr(_health, "journal", lambda unit, lines: asked.append((unit, lines)) or [f"{unit} says hi"])
    targets = [{"name": "omni0", "unit": "vllm-omni@omni0", "health_url": server + "/health", "gpus": [0, 1]},
               {"name": "omni1", "unit": "vllm-omni@omni1", "url": server, "health_url": server + "/x/health"},
               {"name": "omni2", "unit": "vllm-omni@omni2", "health_url": f"http://127.0.0.1:{closed_port()}/health"}]
    seen = _health.look(targets, 20, 2)
    assert [(s["name"], s["status"], s["healthy"]) for s in seen] == [
        ("omni0", 200, True), ("omni1", 503, False), ("omni2", None, False)]
    assert seen[0]["journal"] == [] and seen[0]["problem"] == ""
    assert seen[1]["url"] == server + "/x/health" and seen[1]["problem"] == "HTTP 503"
    assert "refused" in seen[2]["problem"]
    assert asked == [("vllm-omni@omni1", 20), ("vllm-omni@omni2", 20)]
    assert seen[2]["journal"] == ["vllm-omni@omni2 says hi"]


def test_the_journal_is_the_current_runs(monkeypatch):
    calls = []

    def run(argv):
        calls.append(argv)
        return "abc123\n" if argv[0] == "systemctl" else "line one\n\nline two\n"

    monkeypatch.setattr(_health, "_run", run)
    assert _health.journal("vllm-omni@omni0", 5) == ["line one", "line two"]
    assert calls[1] == ["journalctl", "_SYSTEMD_INVOCATION_ID=abc123", "-n", "5", "--no-pager", "-o", "cat"]
    monkeypatch.setattr(_health, "_run", lambda argv: calls.append(argv) or "")
    assert _health.journal("never-started", 5) == []
    assert calls[-1][:3] == ["journalctl", "-u", "never-started"]


def test_targets_without_name_unit_or_health_url_are_named():
    # A base URL alone ("url") is not enough: the plan's health URLs are whole and nothing appends a path.
    assert _health.incomplete([{"name": "a", "unit": "u", "health_url": "http://x/health"}, {"name": "b", "unit": "u"},
                               {"unit": "u", "health_url": "http://y"}, "not a dict",
                               {"name": "e", "unit": "u", "url": "http://x"}]) == ["1", "2", "3", "4"]
