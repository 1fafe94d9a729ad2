"""roles/upgrade/tasks/router_members.yml through ansible-playbook, against routers and a front door on loopback.

A roll drains and re-admits pipelines before the router play moves the router, so in a deploy that turns the front
door on or off the running router listens where the door's previous state put it. The tasks ask each router on its
first roll address (loopback, behind a door) and, where nothing listens there, on its second (its public port), and
stop with both addresses named when neither answers. Here the "router" records what it is asked; the "door" answers
plain HTTP with 400, as nginx does on its TLS port.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from unitlib import REPO


class Endpoint:
    """An HTTP server on 127.0.0.1 answering every POST with ``status`` and recording the paths."""

    def __init__(self, status: int):
        calls = self.calls = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                calls.append(self.path)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def closed_url() -> str:
    """A loopback address where nothing listens (a port taken and given back)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


@pytest.fixture
def endpoints():
    made = []

    def make(status: int) -> Endpoint:
        made.append(Endpoint(status))
        return made[-1]

    yield make
    for endpoint in made:
        endpoint.close()


PIPELINES = [{"name": "omni0", "url": "http://10.0.0.11:8091"}, {"name": "omni1", "url": "http://10.0.0.11:8092"}]


def ask(tmp_path, roll_admin_urls: list[str], action: str = "remove_worker") -> subprocess.CompletedProcess:
    plan = {"router": {"hosts": ["localhost"], "unit": "vllm-omni-router.service",
                       "per_host": {"localhost": {"roll_admin_urls": roll_admin_urls}}}}
    playbook = tmp_path / "ask.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [{
        "name": "the tasks under test", "ansible.builtin.include_tasks": str(REPO / "roles/upgrade/tasks/router_members.yml"),
        "vars": {"upgrade_router_action": action, "upgrade_router_pipelines": PIPELINES}}]}]))
    (tmp_path / "vars.json").write_text(json.dumps({"vllm_omni_plan": plan}))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", "-e", f"@{tmp_path / 'vars.json'}",
                           "-e", f"ansible_python_interpreter={sys.executable}", str(playbook)],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=300)


EXPECTED = ["/remove_worker?url=http%3A//10.0.0.11%3A8091", "/remove_worker?url=http%3A//10.0.0.11%3A8092"]


def test_a_router_behind_a_door_is_asked_on_loopback_and_the_door_never(tmp_path, endpoints):
    """The door is on (and stays on, or this deploy turns it off): the router is on loopback."""
    router, door = endpoints(200), endpoints(400)
    result = ask(tmp_path, [router.url, door.url])
    assert result.returncode == 0, result.stdout[-3000:]
    assert router.calls == EXPECTED
    assert door.calls == []


def test_a_router_without_a_door_yet_is_asked_on_its_public_port(tmp_path, endpoints):
    """No door before this deploy (which may turn one on): nothing on loopback, the router on its public port."""
    router = endpoints(200)
    result = ask(tmp_path, [closed_url(), router.url], action="add_worker")
    assert result.returncode == 0, result.stdout[-3000:]
    assert router.calls == [path.replace("remove_worker", "add_worker") for path in EXPECTED]


def test_a_worker_the_router_does_not_know_is_no_failure(tmp_path, endpoints):
    router = endpoints(404)
    result = ask(tmp_path, [router.url, closed_url()])
    assert result.returncode == 0, result.stdout[-3000:]
    assert router.calls == EXPECTED


def test_re_admission_takes_only_200_as_done(tmp_path, endpoints):
    router = endpoints(404)
    result = ask(tmp_path, [router.url, closed_url()], action="add_worker")
    assert result.returncode != 0
    assert "Status code was 404" in result.stdout, result.stdout[-3000:]


def test_a_router_answering_at_neither_address_stops_the_roll_naming_both(tmp_path):
    first, second = closed_url(), closed_url()
    result = ask(tmp_path, [first, second])
    output = " ".join(result.stdout.split())
    assert result.returncode != 0
    assert f"router host localhost: its admin API answered at none of {first}, {second}" in output, output[-3000:]
    assert "pipeline omni0 could not be taken out of it" in output
    assert "systemctl status vllm-omni-router.service" in output
    assert "Traceback" not in result.stdout + result.stderr


def test_a_door_answering_where_the_router_was_expected_is_a_failure_not_a_drain(tmp_path, endpoints):
    """Anything but 200 or 404 from the first address that answers fails the task: never taken as drained."""
    door = endpoints(400)
    result = ask(tmp_path, [door.url, closed_url()])
    assert result.returncode != 0
    assert "Status code was 400" in result.stdout, result.stdout[-3000:]
