"""Self-healing: the plan's self-heal section (what each host's agent watches, its port and firewall rule, the
refusals) and the agent itself (roles/engine/files/vllm_omni_heal.py): when it restarts, in which order across
hosts, when it must not, its backoff and bound, its state and metrics. The lab runs it under systemd
(tests/lab/test_multihost.py)."""

from __future__ import annotations

import importlib.util
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socket import socket

import pytest
import yaml
from testlib import REPO
from unitlib import inventory, problems_of

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts._render import render_tree

spec = importlib.util.spec_from_file_location("vllm_omni_heal", REPO / "roles" / "engine" / "files" / "vllm_omni_heal.py")
heal = importlib.util.module_from_spec(spec)
spec.loader.exec_module(heal)

TEXT = {"vllm_omni_audio_output": False}


def hosts(*gpu_counts: int) -> dict:
    return {f"gpu-{chr(97 + i)}": {"ansible_host": f"10.0.0.{11 + i}", "vllm_omni_gpus": list(range(n))}
            for i, n in enumerate(gpu_counts)}


# --- the plan --------------------------------------------------------------------------------------


def test_each_host_watches_its_own_processes_and_a_headless_stage_watches_its_head():
    plan = build_plan(inventory(hosts(2, 2), {**TEXT, "vllm_omni_tensor_parallel_size": 2}))
    section = plan["self_heal"]
    assert section["per_host"]["gpu-a"]["watch"] == [
        {"pipeline": "omni-span0", "unit": "vllm-omni@omni-span0.service", "process": "head",
         "probe": "http://10.0.0.11:8091/health"}]
    assert section["per_host"]["gpu-b"]["watch"] == [
        {"pipeline": "omni-span0-decode0", "unit": "vllm-omni@omni-span0-decode0.service", "process": "headless",
         "probe": "http://10.0.0.11:8091/health"}]  # the head's /health, on the other host
    assert (section["enabled"], section["interval"], section["after"], section["max_restarts"]) == (True, 10, 3, 3)
    assert section["start_grace"] == plan["settings"]["vllm_omni_init_timeout"]["value"]
    rendered = render_tree(plan)
    config = json.loads(rendered["gpu-b/self-heal/self-heal.json"])
    assert config["watch"] == section["per_host"]["gpu-b"]["watch"] and config["address"] == "10.0.0.12"
    unit = rendered["gpu-b/systemd/vllm-omni-heal.service"]
    assert "ExecStart=/usr/bin/python3 /opt/vllm-omni/self-heal/vllm_omni_heal.py /etc/vllm-omni/self-heal.json" in unit
    # Its port is planned, reserved and opened like every other: to the inventory and the monitoring clients.
    assert {"service": "self-heal", "purpose": "metrics", "first": 9097, "last": 9097} in plan["listen_ports"]["gpu-b"]
    rule = next(r for r in plan["firewall"]["per_host"]["gpu-b"]["rules"] if r["service"] == "self-heal")
    assert rule["clients_from"] == "vllm_omni_monitoring_client_cidrs" and "pipeline" not in rule
    footprint = plan["footprint"]["gpu-b"]
    assert {"name": "vllm-omni-heal.service", "component": "engine"} in footprint["units"]
    installed = {f["path"] for f in footprint["files"]}
    assert installed >= {"/opt/vllm-omni/self-heal/vllm_omni_heal.py", "/etc/vllm-omni/self-heal.json",
                         "/etc/systemd/system/vllm-omni-heal.service"}


def test_the_agent_runs_under_each_host_platforms_own_interpreter_and_the_role_reads_its_unit_path_from_the_plan():
    machines = hosts(2, 2)
    machines["gpu-b"]["vllm_omni_host_platform"] = "rhel9"
    plan = build_plan(inventory(machines, TEXT))
    section = plan["self_heal"]
    assert {host: entry["python"] for host, entry in section["per_host"].items()} == {
        "gpu-a": "/usr/bin/python3", "gpu-b": plan["platforms"]["rhel9"]["interpreter"]}
    assert plan["platforms"]["rhel9"]["interpreter"] != "/usr/bin/python3"  # else this proves nothing
    rendered = render_tree(plan)
    for host in ("gpu-a", "gpu-b"):
        unit = rendered[f"{host}/systemd/vllm-omni-heal.service"]
        assert f"ExecStart={section['per_host'][host]['python']} {section['program']} {section['config']}\n" in unit
    assert section["unit_file"] == f"{plan['paths']['unit_dir']}/{section['unit']}"
    assert section["unit_file"] in {f["path"] for f in plan["footprint"]["gpu-b"]["files"]}
    role = (REPO / "roles" / "engine" / "tasks" / "self_heal.yml").read_text()
    assert "engine_heal.unit_file" in role and "unit_dir" not in role


def test_prometheus_scrapes_every_agent_and_alerts_on_a_self_heal_and_on_giving_up():
    plan = build_plan(inventory(hosts(2), {**TEXT, "vllm_omni_monitoring_enabled": True}))
    rendered = render_tree(plan)
    targets = json.loads(rendered["prometheus/targets/self-heal.json"])
    assert targets == [{"targets": ["10.0.0.11:9097"], "labels": {"host": "gpu-a"}}]
    rules = {r["alert"]: r for r in yaml.safe_load(rendered["prometheus/rules.yml"])["groups"][0]["rules"]}
    assert 'vllm_omni_self_heal_restarts_total{job="vllm-omni-self-heal"}' in rules["VllmOmniSelfHealed"]["expr"]
    assert rules["VllmOmniSelfHealGaveUp"]["labels"]["severity"] == "critical"


def test_a_self_heal_port_on_an_engine_port_is_refused_naming_both():
    problems = problems_of(inventory(hosts(2), {**TEXT, "vllm_omni_self_heal_port": 8091}))
    assert len(problems) == 1 and "vllm_omni_self_heal_port" in problems[0] and "8091" in problems[0], problems


@pytest.mark.parametrize("name, value", [("vllm_omni_self_heal_after", 0), ("vllm_omni_self_heal_interval", 0),
                                         ("vllm_omni_self_heal_max_restarts", 0), ("vllm_omni_self_heal", "sometimes")])
def test_bad_self_heal_settings_are_refused(name, value):
    problems = problems_of(inventory(hosts(2), {**TEXT, name: value}))
    assert len(problems) == 1 and name in problems[0], problems


# --- the agent -------------------------------------------------------------------------------------


class Host:
    """systemd and the probes as the agent sees them, under the test's control."""

    def __init__(self, tmp_path, watch: list[dict], **config):
        self.now = 1000.0
        self.units = {w["unit"]: ["active", 1_000_000] for w in watch}  # entered at monotonic 1 s
        self.answers = {w["probe"]: (heal.OK, "200") for w in watch}
        self.restarted: list[tuple[str, bool]] = []
        self.config = {"enabled": True, "interval": 10, "after": 3, "max_restarts": 3, "window": 3600,
                       "probe_timeout": 5.0, "start_grace": 600, "port": 0, "address": "127.0.0.1",
                       "state_file": str(tmp_path / "state.json"), "pause_file": str(tmp_path / "pause"),
                       "watch": watch, **config}

    def agent(self):
        return heal.Agent(self.config, clock=lambda: self.now, monotonic=lambda: self.now,
                          probe_fn=lambda url, timeout: self.answers[url],
                          unit_fn=lambda unit: tuple(self.units[unit]), restart_fn=self._restart)

    def _restart(self, unit, hung):
        self.restarted.append((unit, hung))
        self.units[unit][1] = int(self.now * 1e6)  # a new start

    def ticks(self, agent, count: int) -> None:
        for _tick in range(count):
            self.now += self.config["interval"]
            agent.tick()


SINGLE = {"pipeline": "omni0", "unit": "vllm-omni@omni0.service", "process": "single",
          "probe": "http://10.0.0.11:8091/health"}
HEADLESS = {"pipeline": "omni-span0-decode0", "unit": "vllm-omni@omni-span0-decode0.service", "process": "headless",
            "probe": "http://10.0.0.12:8091/health"}
HUNG = (heal.FAILING, "no answer within 5 s")


def test_a_hung_single_pipeline_is_killed_and_restarted_after_three_failed_probes_and_counted(tmp_path):
    host = Host(tmp_path, [SINGLE])
    agent = host.agent()
    host.ticks(agent, 2)
    assert agent.watches[0].state == "serving"
    host.answers[SINGLE["probe"]] = HUNG
    host.ticks(agent, 2)
    assert host.restarted == [] and agent.watches[0].streak == 2
    host.ticks(agent, 1)
    assert host.restarted == [("vllm-omni@omni0.service", True)]  # hung: SIGKILL first
    state = json.loads((tmp_path / "state.json").read_text())["watch"][0]
    assert state["restarts_total"] == 1 and "/health failed 3 times in a row" in state["last"]["reason"]
    # The new start is given its grace: failing probes before it first serves restart nothing.
    host.ticks(agent, 10)
    assert len(host.restarted) == 1 and agent.watches[0].state == "starting"


def test_an_http_error_restarts_without_a_kill(tmp_path):
    host = Host(tmp_path, [SINGLE])
    agent = host.agent()
    host.ticks(agent, 1)
    host.answers[SINGLE["probe"]] = (heal.FAILING, "HTTP 503")
    host.ticks(agent, 3)
    assert host.restarted == [("vllm-omni@omni0.service", False)]


def test_a_stopped_unit_and_a_paused_host_are_left_alone(tmp_path):
    host = Host(tmp_path, [SINGLE])
    agent = host.agent()
    host.ticks(agent, 1)
    host.units[SINGLE["unit"]][0] = "inactive"  # systemctl stop
    host.answers[SINGLE["probe"]] = (heal.DOWN, "not listening")
    host.ticks(agent, 20)
    assert host.restarted == [] and agent.watches[0].state == "stopped"
    host.units[SINGLE["unit"]][0] = "active"
    (tmp_path / "pause").write_text(f"{host.now + 3600}\n")  # a deploy works on the host
    host.ticks(agent, 20)
    assert host.restarted == [] and agent.watches[0].state.startswith("paused")
    (tmp_path / "pause").write_text(f"{host.now - 1}\n")  # a pause that expired (a deploy that died)
    host.ticks(agent, 3)
    assert len(host.restarted) == 1


def test_a_headless_stage_waits_while_its_head_fails_and_restarts_once_the_head_is_down(tmp_path):
    host = Host(tmp_path, [HEADLESS])
    agent = host.agent()
    host.ticks(agent, 1)
    host.answers[HEADLESS["probe"]] = (heal.FAILING, "HTTP 500")  # the head errored: its own host restarts it
    host.ticks(agent, 10)
    assert host.restarted == [] and agent.watches[0].state.startswith("waiting")
    host.answers[HEADLESS["probe"]] = (heal.DOWN, "not listening ([Errno 111] Connection refused)")  # restarting
    host.ticks(agent, 3)
    assert host.restarted == [("vllm-omni@omni-span0-decode0.service", False)]
    assert "its head is down" in agent.watches[0].last["reason"]
    host.ticks(agent, 20)  # the head is still starting: this stage waits for it within its grace
    assert len(host.restarted) == 1


def test_a_stage_relaunched_by_systemd_follows_a_head_it_saw_failing_once_that_head_goes_down(tmp_path):
    """kill -9 of the headless process on a GPU: systemd relaunches it at once, against a head that then errs (HTTP
    500) and is restarted by its own agent; the relaunched stage must restart again, not wait out its grace."""
    host = Host(tmp_path, [HEADLESS])
    agent = host.agent()
    host.units[HEADLESS["unit"]][1] = int((host.now + 1) * 1e6)  # relaunched by systemd
    host.answers[HEADLESS["probe"]] = (heal.FAILING, "HTTP 500")
    host.ticks(agent, 3)
    assert host.restarted == []
    host.answers[HEADLESS["probe"]] = (heal.DOWN, "not listening")
    host.ticks(agent, 3)
    assert host.restarted == [("vllm-omni@omni-span0-decode0.service", False)]


def test_a_stage_that_never_saw_its_head_waits_within_its_grace(tmp_path):
    host = Host(tmp_path, [HEADLESS])
    agent = host.agent()
    host.units[HEADLESS["unit"]][1] = int(host.now * 1e6)  # started just now, its head not up yet
    host.answers[HEADLESS["probe"]] = (heal.DOWN, "not listening")
    host.ticks(agent, 30)
    assert host.restarted == [] and agent.watches[0].state == "starting"


def test_restarts_back_off_then_the_agent_gives_up_and_remembers_across_its_own_restart(tmp_path):
    host = Host(tmp_path, [SINGLE], start_grace=0)
    agent = host.agent()
    host.answers[SINGLE["probe"]] = (heal.FAILING, "HTTP 503")
    host.ticks(agent, 3)
    assert len(host.restarted) == 1
    host.ticks(agent, 5)
    assert len(host.restarted) == 1  # the 2nd restart waits for 3 * 2 failed probes
    host.ticks(agent, 1)
    assert len(host.restarted) == 2
    host.ticks(agent, 12)
    assert len(host.restarted) == 3
    host.ticks(agent, 100)
    assert len(host.restarted) == 3 and agent.watches[0].gave_up and "gave up" in agent.watches[0].state
    assert 'vllm_omni_self_heal_gave_up{pipeline="omni0",unit="vllm-omni@omni0.service",process="single"} 1' \
        in agent.metrics()
    again = host.agent()  # the agent restarted: the count and the window survive in its state file
    assert again.watches[0].restarts_total == 3 and len(again.watches[0].recent) == 3
    host.answers[SINGLE["probe"]] = heal.OK, "200"
    host.ticks(again, 1)
    assert not again.watches[0].gave_up  # it serves again


def test_with_self_heal_off_the_agent_reports_what_it_would_do_and_restarts_nothing(tmp_path):
    host = Host(tmp_path, [SINGLE], enabled=False)
    agent = host.agent()
    host.ticks(agent, 1)
    host.answers[SINGLE["probe"]] = HUNG
    host.ticks(agent, 10)
    assert host.restarted == [] and agent.watches[0].state.startswith("would restart")
    assert "vllm_omni_self_heal_enabled 0" in agent.metrics()


def test_the_agent_exports_exactly_the_listed_metric_names(tmp_path):
    listed = set(yaml.safe_load((REPO / "data" / "metrics.yml").read_text())["self_heal"]["metrics"])
    text = Host(tmp_path, [SINGLE, HEADLESS]).agent().metrics()
    exported = {line.split("{")[0].split()[0] for line in text.splitlines() if line and not line.startswith("#")}
    assert exported == listed


# --- the probe against real sockets -----------------------------------------------------------------


class Answer(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/hang":
            time.sleep(3)
        self.send_response(503 if self.path == "/broken" else 200)
        self.end_headers()

    def log_message(self, *args):
        return


def test_the_probe_tells_serving_failing_hung_and_down_apart():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert heal.probe(f"{base}/health", 2) == (heal.OK, "200")
        assert heal.probe(f"{base}/broken", 2) == (heal.FAILING, "HTTP 503")
        assert heal.probe(f"{base}/hang", 0.5) == (heal.FAILING, "no answer within 0.5 s")
    finally:
        server.shutdown()
        server.server_close()
    closed = socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    result, detail = heal.probe(f"http://127.0.0.1:{port}/health", 2)
    assert result == heal.DOWN and detail.startswith("not listening"), detail


def test_the_benchmarks_doc_states_the_recorded_lab_self_heal_numbers():
    """docs/benchmarks.md's self-heal rows are the lab run's recorded ones (tests/fixtures/lab-self-heal)."""
    recorded = json.loads((REPO / "tests" / "fixtures" / "lab-self-heal" / "faults.json").read_text())
    doc = (REPO / "docs" / "benchmarks.md").read_text()
    for name in ("self_heal_hung_headless", "self_heal_hung_single"):
        run = recorded[name]
        assert run["load"]["failed"] == 0 and run["serves_again_s"] is not None
        assert (f"| {run['load']['sent']} | **0** | serving again after {run['serves_again_s']} s "
                f"(load ran {run['load']['seconds']:.1f} s) |") in doc, name
    latching = json.loads((REPO / "tests" / "fixtures" / "lab-self-heal" / "latching-head.json").read_text())
    kill = latching["kill_9_headless_latching_head"]
    assert kill["head_errored_s"] is not None and kill["head_reason"].startswith("/health failed")
    assert (f"it erred {kill['head_errored_s']} s after the kill" in doc and f"| {kill['load']['sent']:,} | "
            f"{kill['load']['failed']} | serving again after {kill['serves_again_s']} s (load ran "
            f"{kill['load']['seconds']:.1f} s) |") in doc
    assert "its head is down" in recorded["self_heal_hung_headless"]["decode_reason"]
    assert recorded["self_heal_hung_headless"]["head_reason"].startswith("/health failed")


def test_a_state_file_it_cannot_write_is_said_once_and_watching_goes_on(tmp_path, capsys):
    host = Host(tmp_path, [SINGLE], state_file=str(tmp_path / "gone" / "state.json"))
    agent = host.agent()
    host.answers[SINGLE["probe"]] = (heal.FAILING, "HTTP 503")
    host.ticks(agent, 4)
    assert len(host.restarted) == 1  # it still acted
    assert capsys.readouterr().out.count("cannot write") == 1
