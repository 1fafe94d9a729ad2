"""Pipelines that span hosts, on the local lab (SIMULATOR stand-ins; needs root).

Three machines: lab-1 holds a whole text-out PD pipeline (omni0, two GPUs) and the router; lab-2 and
lab-3 have one GPU each, too few for a whole pipeline, so their GPUs make one pipeline that spans
both: its head (prefill) on lab-2, a headless decode stage on lab-3. lab-1 is an inventory peer but
not a host of that pipeline. lab-1 and lab-2 run Debian 12, lab-3 Debian 13: one deployment over two
host platforms, each host's venvs from its own platform's locks, one pipeline across both.

SIMULATOR: the head's unit runs vllm-router in PD mode (each request to a prefill, then a decode
stand-in) beside an xpyd-sim prefill; the headless unit runs an xpyd-sim decode stand-in. Units,
files, ports, firewall, start order, restarts, upgrade and stop are the collection's, as for the real
engine; the real engine's own head/headless handshake is proven in test_real_engine.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import time
from pathlib import Path

import pytest
from test_faults import CA_FILE, KEY_FILE, ROUTER, Load, record
from test_lab import lab, on, playbook, put, recap, scenario, started_at
from test_security import controller_get, reaches

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root (CI runs as root)")

KEY = "multihost-test-key-0123456789abcdef"
ADDRESS = {"lab-1": "10.77.0.11", "lab-2": "10.77.0.12", "lab-3": "10.77.0.13"}
CHAT = {"model": "qwen3-omni", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def inventory(tmp_path_factory, **group_vars) -> Path:
    groups = {"vllm_omni": {"hosts": {"lab-1": {"vllm_omni_gpus": [0, 1]}, "lab-2": {"vllm_omni_gpus": [0]},
                                      "lab-3": {"vllm_omni_gpus": [0]}}},
              "vllm_omni_router": {"hosts": {"lab-1": None}}}
    return scenario(tmp_path_factory.mktemp("inventory"), groups,
                    {"vllm_omni_engine_backend": "simulator", "vllm_omni_served_model_name": "qwen3-omni",
                     "vllm_omni_api_key": KEY, "vllm_omni_audio_output": False,
                     # The self-heal agents probe every 2 s (3 failed probes: 6 s), not every 10 s, so that the
                     # lab's faults heal within seconds.
                     "vllm_omni_self_heal_interval": 2, **group_vars})


@pytest.fixture(scope="module")
def spanning(tmp_path_factory):
    lab("up", "--hosts", "3", "--releases", "lab-3=trixie")
    KEY_FILE.write_text(KEY + "\n")
    directory = inventory(tmp_path_factory)
    playbook("deploy.yml", directory)
    render = tmp_path_factory.mktemp("render") / "out"
    playbook("render.yml", directory, "-e", f"vllm_omni_render_dir={render}")
    yield directory, json.loads((render / "plan.json").read_text())
    lab("down")


def test_each_host_builds_its_venvs_from_its_own_platforms_lock_and_a_rerun_changes_nothing(spanning):
    directory, _unused = spanning
    # Every play (vllm_omni_converge=full): the no-op check would end an unchanged rerun after one look per
    # host, and this is the one rerun of a fleet of both platforms whose roles must change nothing.
    rerun = playbook("deploy.yml", directory, "-e", "vllm_omni_converge=full")
    # The plan's own words, after discovery read each host's OS (the YAML callback folds long lines).
    said = " ".join(rerun.stdout.split())
    assert "platform debian12 (discovered; venvs from /usr/bin/python3, Python 3.11, glibc >= 2.36): lab-1, lab-2" \
        in said, rerun.stdout[-4000:]
    assert "platform debian13 (discovered; venvs from /usr/bin/python3, Python 3.13, glibc >= 2.41): lab-3" in said
    changed = {host: counts["changed"] for host, counts in recap(rerun.stdout).items() if host.startswith("lab-")}
    assert changed == {"lab-1": 0, "lab-2": 0, "lab-3": 0}, rerun.stdout[-3000:]
    for host, python, platform in (("lab-1", "3.11.", "debian12"), ("lab-2", "3.11.", "debian12"),
                                   ("lab-3", "3.13.", "debian13")):
        versions = on(host, 'for venv in /opt/vllm-omni/venvs/*/; do "$venv/bin/python" --version; done').split()[1::2]
        assert versions and all(version.startswith(python) for version in versions), (host, versions)
        sets = on(host, "ls /var/cache/vllm-omni/wheelhouse").split()
        assert sets and all(f"-{platform}-" in name for name in sets), (host, sets)


def decode_requests() -> int:
    return int(on("lab-3", "journalctl -u vllm-omni@omni-span0-decode0 -o cat --no-pager | grep -c 'POST /v1/chat'")
               .strip() or 0)


def test_the_spanning_pipeline_is_planned_across_both_hosts_and_serves(spanning):
    _unused, plan = spanning
    pipeline = plan["distributed_pipelines"]["omni-span0"]
    assert pipeline["hosts"] == ["lab-2", "lab-3"] and pipeline["head"]["url"] == "http://10.77.0.12:8091"
    assert [(e["host"], e["role"], e["headless"]) for e in pipeline["engines"]] == [
        ("lab-2", "prefill", False), ("lab-3", "decode", True)]
    assert sorted(plan["worker_urls"]) == ["http://10.77.0.11:8091", "http://10.77.0.12:8091"]
    assert on("lab-3", "systemctl is-active vllm-omni@omni-span0-decode0").strip() == "active"
    before = decode_requests()
    for _round in range(6):  # round robin over the two pipelines: three reach the spanning one
        assert controller_get(f"{ROUTER}/v1/chat/completions", KEY, "POST", CHAT) == 200
    assert decode_requests() - before >= 3, "no request reached the decode stage on the other host"
    playbook("status.yml", spanning[0])
    document = json.loads((CA_FILE.parents[1] / "reports" / plan["deployment_id"] / "status.json").read_text())
    rows = {(p["host"], p["pipeline"]): p for p in document["pipelines"]}
    assert rows[("lab-3", "omni-span0-decode0")]["process"] == "headless" and rows[("lab-3", "omni-span0-decode0")]["ok"]
    assert document["ok"], document


LISTENER = "vomni-probe-listener"


def listening(host: str, ports: list[int]) -> None:
    """A throw-away listener on the host's address (stand-ins leave these ports unbound); ``quiet`` ends it."""
    script = (f"import socket,time\nss=[]\nfor p in {ports!r}:\n s=socket.socket();s.setsockopt(socket.SOL_SOCKET,"
              f"socket.SO_REUSEADDR,1);s.bind(('{ADDRESS[host]}',p));s.listen();ss.append(s)\ntime.sleep(120)\n")
    on(host, f"nohup python3 -c \"{script}\" {LISTENER} >/dev/null 2>&1 & sleep 1")


def quiet(host: str) -> None:
    on(host, f"pkill -f {LISTENER}; sleep 1")


def test_its_ports_open_to_its_own_hosts_only(spanning):
    """Bootstrap, Mooncake and the stage ZMQ slice of the head: lab-3 (the pipeline's) gets in, lab-1 (an
    inventory peer outside the pipeline) does not; the head's API stays open to the router's host."""
    _unused, plan = spanning
    head = next(p for p in plan["hosts"]["lab-2"]["pipelines"] if p["name"] == "omni-span0")
    ports = [head["ports"]["bootstrap"], head["ports"]["mooncake_rpc"][0], head["ports"]["zmq"][0] + 1]
    listening("lab-2", ports)
    try:
        for port in ports:
            assert reaches("lab-3", ADDRESS["lab-2"], port), port
            assert not reaches("lab-1", ADDRESS["lab-2"], port), port
    finally:
        quiet("lab-2")  # preflight of the next deploy would find a foreign process on these ports
    assert reaches("lab-1", ADDRESS["lab-2"], head["ports"]["api"])  # the router calls the head
    # The decode stand-in's API is the head's to call, nobody else's.
    assert reaches("lab-2", ADDRESS["lab-3"], 8091) and not reaches("lab-1", ADDRESS["lab-3"], 8091)


def test_a_change_on_one_host_restarts_the_whole_pipeline_in_order(spanning):
    directory, _unused = spanning
    before = {"head": started_at("lab-2", "vllm-omni@omni-span0"),
              "decode": started_at("lab-3", "vllm-omni@omni-span0-decode0"), "omni0": started_at("lab-1", "vllm-omni@omni0")}
    on("lab-3", "echo '# drift' >> /etc/systemd/system/vllm-omni@omni-span0-decode0.service.d/10-pipeline.conf")
    result = playbook("deploy.yml", directory)
    assert "changed: [lab-3] => (item=omni-span0-decode0)" in result.stdout.split("stop headless stages")[1]
    after = {"head": started_at("lab-2", "vllm-omni@omni-span0"),
             "decode": started_at("lab-3", "vllm-omni@omni-span0-decode0"), "omni0": started_at("lab-1", "vllm-omni@omni0")}
    assert after["head"] != before["head"] and after["decode"] != before["decode"]
    assert after["omni0"] == before["omni0"], "a pipeline on another host restarted too"
    # The order, from systemd's own timestamps (monotonic clocks of one kernel: the lab shares it): the headless
    # stage stopped, then the head stopped and started, then the headless stage started.
    head, decode = unit_times("lab-2", "vllm-omni@omni-span0"), unit_times("lab-3", "vllm-omni@omni-span0-decode0")
    assert decode["stopped"] <= head["stopping"] and head["started"] <= decode["started"], (head, decode)
    # Each stop is the processes' own work: far inside the units' TimeoutStopSec (120 s) and the real engine's
    # 30 s orchestrator join (docs/engine-facts.md), so no step of the restart waits on a timeout.
    phases = {"headless_stop_s": seconds(decode["stopping"], decode["stopped"]),
              "head_stop_s": seconds(head["stopping"], head["stopped"]),
              "head_start_s": seconds(head["stopped"], head["started"]),
              "headless_start_after_head_s": seconds(head["started"], decode["started"]),
              "restart_s": seconds(decode["stopping"], decode["started"])}
    record("distributed_restart", **phases)
    assert phases["headless_stop_s"] < 10 and phases["head_stop_s"] < 10, phases
    # The head's ExecStop= signals its unit's process group: systemd starts the main process as its group's leader.
    main = on("lab-2", "systemctl show -p MainPID --value vllm-omni@omni-span0").strip()
    assert on("lab-2", f"ps -o pgid= -p {main}").strip() == main
    assert "ExecStop=" in on("lab-2", "systemctl cat vllm-omni@omni-span0")
    assert "# drift" not in on("lab-3", "cat /etc/systemd/system/vllm-omni@omni-span0-decode0.service.d/10-pipeline.conf")


def unit_times(host: str, unit: str) -> dict[str, int]:
    """When the unit last began to stop, stopped and started (systemd's monotonic timestamps, microseconds)."""
    names = {"ActiveExitTimestampMonotonic": "stopping", "InactiveEnterTimestampMonotonic": "stopped",
             "ActiveEnterTimestampMonotonic": "started"}
    values = on(host, f"systemctl show {' '.join(f'-p {name}' for name in names)} {unit}")
    found = dict(line.split("=", 1) for line in values.split())
    return {names[name]: int(found[name]) for name in names}


def seconds(start: int, end: int) -> float:
    return round((end - start) / 1e6, 2)


def test_rolling_upgrade_of_the_spanning_pipeline_under_load_drops_no_request(spanning, tmp_path_factory):
    healed = {host: {u: w["restarts_total"] for u, w in heal_restarts(host).items()} for host in ADDRESS}
    load = Load()
    start = time.monotonic()
    playbook("upgrade.yml", inventory(tmp_path_factory, vllm_omni_extra_env={"ROLLOUT_MARK": "1"}))
    seconds = time.monotonic() - start
    report = load.report()
    assert report["failed"] == 0 and report["ok"] > 100, report
    # The roll restarted every pipeline; the agents, paused while it worked, restarted none of them.
    assert {host: {u: w["restarts_total"] for u, w in heal_restarts(host).items()} for host in ADDRESS} == healed
    for host in ADDRESS:
        assert on(host, "test -e /var/lib/vllm-omni-serve/self-heal-pause && echo paused || echo lifted").strip() == "lifted"
    for host, name in (("lab-2", "omni-span0"), ("lab-3", "omni-span0-decode0"), ("lab-1", "omni0")):
        assert on(host, f"grep -h ROLLOUT_MARK /etc/vllm-omni/{name}/engine.env").strip() == 'ROLLOUT_MARK="1"', name
    record("rolling_upgrade_spanning", seconds=round(seconds, 1), load=report)


LATCH_DIR = "/usr/local/lib/vllm-omni-lab"
LATCH_DROPIN = "/etc/systemd/system/vllm-omni@omni-span0.service.d/20-lab-latch.conf"
HEAD_URL = "http://10.77.0.12:8091"


def head_answers(path: str = "/health", body: dict | None = None) -> str:
    """The spanning pipeline's head's HTTP status for ``path``, asked from lab-1 (the router's host)."""
    data = (f"-X POST -H 'Content-Type: application/json' -H 'Authorization: Bearer {KEY}' -d '{json.dumps(body)}' "
            if body else "")
    return on("lab-1", f"curl -s -m 5 -o /dev/null -w '%{{http_code}}' {data}{HEAD_URL}{path}").strip()


def wait_serving(timeout: float = 120) -> None:
    """Until a request through the head reaches the decode stage on lab-3."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        count = decode_requests()
        if head_answers("/v1/chat/completions", CHAT) == "200" and decode_requests() > count:
            return
        time.sleep(1)
    pytest.fail(f"the spanning pipeline did not serve within {timeout} s")


@contextlib.contextmanager
def latching_head(plan: dict):
    """The spanning pipeline's head as the real 0.26 head behaves once it loses a stage (tests/lab/head_latch.py):
    a drop-in runs the stand-in's prefill and router as the plan says, the router on loopback, behind the latch on
    the head's address and API port. Removed again afterwards (the head restarted as the plan has it)."""
    head = next((p for p in plan["hosts"]["lab-2"]["pipelines"] if p["name"] == "omni-span0"), None)
    assert head is not None, "the plan has no spanning head on lab-2"
    argv = head["argv"]  # /bin/sh -c '<prefill stand-in> & exec "$@"' sh <vllm-router ...>
    first = argv[2].split(" & exec")[0]
    router = list(argv[4:])
    router[router.index("--host") + 1] = "127.0.0.1"
    on("lab-2", f"mkdir -p {LATCH_DIR}")
    put("lab-2", f"{LATCH_DIR}/head_latch.py", (Path(__file__).parent / "head_latch.py").read_text())
    wrapper = (f"#!/bin/sh\n{first} &\n{shlex.join(router)} &\n"
               f"exec /usr/bin/python3 {LATCH_DIR}/head_latch.py {ADDRESS['lab-2']} {head['ports']['api']}\n")
    put("lab-2", f"{LATCH_DIR}/latched-head", wrapper)
    put("lab-2", LATCH_DROPIN, f"[Service]\nExecStart=\nExecStart={LATCH_DIR}/latched-head\n")
    on("lab-2", f"chmod 755 {LATCH_DIR} {LATCH_DIR}/latched-head && chmod 644 {LATCH_DIR}/head_latch.py && "
                "systemctl daemon-reload && systemctl restart vllm-omni@omni-span0")
    try:
        wait_serving()
        yield
    finally:
        on("lab-2", f"rm -rf {LATCH_DROPIN} {LATCH_DIR}; systemctl daemon-reload; systemctl restart vllm-omni@omni-span0")
        wait_serving()


def test_a_killed_headless_stage_whose_head_errs_for_good_is_healed_without_a_person(spanning):
    """kill -9 of the headless decode stage under load, its head behaving as vLLM-Omni 0.26's does (it stays up,
    /health 503 and HTTP 500 to every request, for good): systemd relaunches the stage; lab-2's self-heal agent
    restarts the errored head; the pipeline serves again with no operator. What clients saw is counted."""
    head_unit, decode_unit = "vllm-omni@omni-span0.service", "vllm-omni@omni-span0-decode0.service"
    with latching_head(spanning[1]):
        before = {"head": heal_restarts("lab-2")[head_unit]["restarts_total"],
                  "decode": int(on("lab-3", f"systemctl show -p NRestarts --value {decode_unit}").strip() or 0)}
        head_pid = on("lab-2", f"systemctl show -p MainPID --value {head_unit}").strip()
        load = Load()
        time.sleep(3)
        killed = time.monotonic()
        on("lab-3", f"kill -9 $(systemctl show -p MainPID --value {decode_unit})")
        latched = None  # the head up (its process unchanged) and answering 503/500: the real head's state
        while latched is None and time.monotonic() - killed < 30:
            if head_answers() == "503" and head_answers("/v1/chat/completions", CHAT) == "500" and \
                    on("lab-2", f"systemctl show -p MainPID --value {head_unit}").strip() == head_pid:
                latched = round(time.monotonic() - killed, 1)
            time.sleep(0.2)
        served = serves_again("lab-3", decode_unit, killed)
        report = load.report()
        head = heal_restarts("lab-2")[head_unit]
        decode_restarts = int(on("lab-3", f"systemctl show -p NRestarts --value {decode_unit}").strip() or 0)
        journal = on("lab-2", f"journalctl -u {head_unit} -o cat --no-pager | grep -c 'head_latch: latched'").strip()
    record("kill_9_headless_latching_head", load=report, head_errored_s=latched, serves_again_s=served,
           head_reason=(head["last"] or {}).get("reason"))
    assert latched is not None, "the head stand-in did not err after its stage was killed"
    assert journal not in ("", "0"), journal
    assert head["restarts_total"] == before["head"] + 1 and "/health failed" in head["last"]["reason"], head
    assert decode_restarts > before["decode"], "systemd did not relaunch the killed stage"
    # Its restart time (RestartSec=15 and a start of seconds) plus one minute.
    assert served is not None and served <= 15 + 60, served
    # The router retries a failed request on omni0, which served throughout; the count is the record's.
    assert report["ok"] > 100 and report["failed"] < report["sent"] / 4, report


HEAL_STATE = "/var/lib/vllm-omni-serve/self-heal.json"


def heal_restarts(host: str) -> dict[str, dict]:
    """The self-heal agent's record on ``host``: unit -> {restarts_total, last, state, ...}."""
    return {w["unit"]: w for w in json.loads(on(host, f"cat {HEAL_STATE}"))["watch"]}


def serves_again(unit_host: str, unit: str, since: float, timeout: float = 240) -> float | None:
    """Seconds after ``since`` (monotonic) until a request through the spanning pipeline's head reached its decode
    stage again, or None."""
    count = decode_requests()
    while time.monotonic() - since < timeout:
        if decode_requests() > count and on(unit_host, f"systemctl is-active {unit}").strip() == "active":
            return round(time.monotonic() - since, 1)
        time.sleep(1)
    return None


def test_a_hung_headless_stage_is_healed_by_the_agents_head_first_then_the_stage_on_its_own_host(spanning):
    """The headless decode stage hangs (SIGSTOP: its unit stays active, systemd sees nothing): the head answers
    5xx from then on and nothing else recovers it. lab-2's agent restarts the head (its /health fails); the new head
    waits for its decode stage and does not listen; lab-3's agent, seeing its head down, restarts the stage; the
    pipeline serves again. No SSH between the hosts, no operator."""
    head_unit, decode_unit = "vllm-omni@omni-span0.service", "vllm-omni@omni-span0-decode0.service"
    before = {"head": heal_restarts("lab-2")[head_unit]["restarts_total"],
              "decode": heal_restarts("lab-3")[decode_unit]["restarts_total"]}
    load = Load()
    time.sleep(3)
    hung = time.monotonic()
    on("lab-3", f"kill -STOP $(systemctl show -p MainPID --value {decode_unit})")
    served = serves_again("lab-3", decode_unit, hung)
    report = load.report()
    head, decode = heal_restarts("lab-2")[head_unit], heal_restarts("lab-3")[decode_unit]
    record("self_heal_hung_headless", serves_again_s=served, load=report,
           head_reason=(head["last"] or {}).get("reason"), decode_reason=(decode["last"] or {}).get("reason"))
    assert served is not None, (head, decode)
    assert head["restarts_total"] == before["head"] + 1 and "/health failed" in head["last"]["reason"], head
    assert decode["restarts_total"] == before["decode"] + 1 and "its head is down" in decode["last"]["reason"], decode
    assert head["last"]["at"] < decode["last"]["at"], (head["last"], decode["last"])  # the head first
    # The head's metrics say so to Prometheus (the agent's port is open to inventory hosts).
    metrics = on("lab-1", "curl -s http://10.77.0.12:9097/metrics")
    assert (f'vllm_omni_self_heal_restarts_total{{pipeline="omni-span0",unit="{head_unit}",process="head"}} '
            f'{before["head"] + 1}') in metrics, metrics
    # Requests that reached the spanning pipeline while it hung: the router retries them on omni0.
    assert report["failed"] <= 8 and report["ok"] > 100, report


def test_a_hung_single_process_pipeline_is_killed_and_restarted_by_its_agent_and_status_shows_it(spanning):
    unit = "vllm-omni@omni0.service"
    before = heal_restarts("lab-1")[unit]["restarts_total"]
    load = Load()
    time.sleep(3)
    hung = time.monotonic()
    on("lab-1", f"kill -STOP $(systemctl show -p MainPID --value {unit})")
    back = None
    while time.monotonic() - hung < 120:
        if heal_restarts("lab-1")[unit]["restarts_total"] > before and \
                on("lab-1", "curl -s -o /dev/null -w '%{http_code}' http://10.77.0.11:8091/health") == "200":
            back = round(time.monotonic() - hung, 1)
            break
        time.sleep(1)
    report = load.report()
    record("self_heal_hung_single", serves_again_s=back, load=report)
    assert back is not None, heal_restarts("lab-1")[unit]
    assert "no answer within 5 s" in heal_restarts("lab-1")[unit]["last"]["reason"]
    # What clients saw: requests the router had sent to omni0 before its own health checks took it out hang and fail
    # (counted, in the record); the spanning pipeline served the rest throughout.
    assert report["ok"] > 100 and report["failed"] < report["sent"] / 2, report
    playbook("status.yml", spanning[0])
    document = json.loads((CA_FILE.parents[1] / "reports" / spanning[1]["deployment_id"] / "status.json").read_text())
    row = next(p for p in document["pipelines"] if (p["host"], p["pipeline"]) == ("lab-1", "omni0"))
    assert row["self_heal"]["restarts"] == before + 1 and row["self_heal"]["state"] == "serving", row
    assert row["self_heal"]["last_reason"].startswith("/health failed 3 times in a row"), row


def test_stop_stops_every_stage_and_deploy_brings_the_pipeline_back(spanning, tmp_path_factory):
    directory = inventory(tmp_path_factory, vllm_omni_extra_env={"ROLLOUT_MARK": "1"})
    playbook("stop.yml", directory)
    time.sleep(8)  # longer than 3 probes of the agents: a deliberate stop stays a stop
    for host, unit in (("lab-2", "vllm-omni@omni-span0"), ("lab-3", "vllm-omni@omni-span0-decode0"),
                       ("lab-2", "vllm-omni-heal"), ("lab-3", "vllm-omni-heal")):
        assert on(host, f"systemctl is-active {unit}").strip() == "inactive", unit
    playbook("deploy.yml", directory)
    assert controller_get(f"http://{ADDRESS['lab-2']}:8091/health") == 0  # the controller is no peer of the engines
    assert on("lab-1", "curl -s -o /dev/null -w '%{http_code}' http://10.77.0.12:8091/health").strip() == "200"
    assert CA_FILE.is_file()
