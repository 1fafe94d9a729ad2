"""A PD pipeline spanning two inventory hosts, served on one GPU: head + headless, then the headless killed.

Device side (issue 25, item 4; docs/multi-host-pd.md), run by ``tests/device/pd_serving.sh span NAME=RENDER``
after the payload is staged. RENDER is the render of ``tests/device/inventories/pd-span-text.yml``: two hosts,
each with GPU 0 of this one machine, so the planner spans one text-out PD pipeline over both (prefill and the
head on the first host, a headless decode stage on the second). Standard library only.

1. **Two hosts on one machine.** Each host's address (private IPv4s; the planner rightly refuses loopback for
   hosts that must reach each other) is added to ``lo`` with a netlink request (what ``ip addr add IP/32 dev lo``
   does; the device image lacks iproute2), and removed at the end. Both processes then share one port space,
   which separate hosts would not: the headless process gets the next ``VLLM_PORT`` slice of the plan's
   ``vllm_omni_stage_zmq_port_range`` (``ONE_MACHINE``), so its own ports (torch.distributed, ZMQ) do not take
   the head's. Mooncake's RPC range stays shared, as the two stages of a one-process PD already share it (runs
   1-7). Nothing else differs from the render: each process's argv, engine.env and stage config are laid out at
   the paths its plan entry names.
2. **Started in the deploy's order** (roles/engine/tasks/restart_distributed.yml: heads, then headless stages).
   On one GPU the headless start waits until the head's prefill engine has allocated its KV cache (``--stagger``,
   on by default): two engines profiling one GPU's memory at the same time can each count the other's
   allocations as their own, which is why vLLM-Omni initialises the stages of one process that share a GPU one
   after the other (engine/stage_runtime.py, _initialize_stage_replicas), while a remote stage is waited for in
   parallel. On separate hosts there is nothing to wait for; the wait is reported.
3. **Serve**: /health on the head, then ``--requests`` streamed check requests one at a time and as many from 4
   clients, each judged prefill -> decode by the collection's judge over both processes' logs (the hand-off in
   the head's, the receipt in the headless process's).
4. **kill -9 of the headless stage process under load** (``--kill main``: the headless unit's main process, what
   ``systemctl kill -s KILL`` of its main PID does; ``engine``: its engine-core process, a GPU process crash;
   ``group``: every process of the unit at once). Then, with the clients still sending, what each side does: the
   headless unit is handled as systemd would (faults.Unit: its leftovers stopped, Restart=always after
   RestartSec). If the head exits too, the deploy's order takes over: headless stopped, head started, headless
   started. Recorded: what clients saw (fast errors or hangs, with times), whether and when the head exited or
   detached the dead replica, when the restarted stage registered, and the first chat completion answered in
   full after it, judged prefill -> decode.

5. **Or a restart in the deploy's order** (``--restart natural|bounded`` instead of the kill; issue 27): the
   headless stage stopped as ``systemctl stop`` does (SIGTERM to every process of the unit, SIGKILL after
   TimeoutStopSec), then the head, watched every 0.1 s: when its API port stops listening, when its last
   client connection closes (its HTTP server is done), when the engine logs its orchestrator join, when its
   processes are gone. Both send SIGTERM to every process of the unit; ``natural`` lets the head exit by itself
   (the units before issue 27's stop), ``bounded`` sends SIGKILL to what is left of the unit as soon as its HTTP
   server is done (the head's ExecStop= and KillSignal=SIGKILL, plan/_engine_argv.head_exec_stop). A first
   ``bounded`` run signalled the main process alone: the engine's stage processes, which inherit the listening
   socket, kept the port open for the whole 30 s join (record/gpu-evidence.md, run 10). Then the head and the
   headless stage start again in the deploy's order, and one request is judged prefill -> decode.

Everything lands in $OUT/results.json (key NAME) and $OUT/logs.tar.gz. ``--budget`` keeps the call inside the
device tool's 600 s: the scenario stops waiting when the budget runs out and writes what it has.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import faults
import pd_serving as serving

sys.path.insert(0, str(serving.REPO / "plugins" / "plugin_utils" / "runtime"))
import _pd_evidence

sys.path.insert(0, str(serving.REPO / "roles" / "engine" / "files"))
import vllm_omni_heal  # the self-heal agent the hosts run (roles/engine), its decisions unchanged

# Seconds, for --estimate: two starts on one GPU, one after the other (the head to its prefill's KV cache, about
# 100 s, then the headless process from nothing: assumed about 110 s, against runs 1-7's 106-160 s for a whole
# one-process pipeline), RestartSec (the unit's 15 s) and the headless start again, a few requests, the stops;
# if the head exits too, its own start and the headless one's after it.
EST = {"setup": 10, "ready": 210, "requests": 25, "lead": 8, "restart_sec": 15, "stage_start": 110,
       "registration": 10, "check": 5, "clients_after": 20, "stop": 15, "head_restart": 250, "head_stop": 35}
# The most a watched stop waits before SIGKILL (the units' TimeoutStopSec is 120 s; the call's budget is not).
STOP_WATCH_CAP_S = 60
STAGGER_LINE = re.compile(r"init engine \(profile, create kv cache")


# --- two hosts on one machine -----------------------------------------------------------------


def is_local(ip: str) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((ip, 0))
        except OSError:
            return False
    return True


def netlink_address(ip: str, add: bool, interface: str = "lo") -> str:
    """RTM_NEWADDR / RTM_DELADDR of ip/32 on an interface, as `ip addr add|del IP/32 dev lo` sends it."""
    rtm_newaddr, rtm_deladdr = 20, 21
    nlm_f_request, nlm_f_ack, nlm_f_excl, nlm_f_create = 0x1, 0x4, 0x200, 0x400
    ifa_address, ifa_local = 1, 2
    packed = socket.inet_aton(ip)
    # struct ifaddrmsg: family, prefix length, flags, scope (0: global, as `ip addr add` gives), interface index
    body = struct.pack("=BBBBI", socket.AF_INET, 32, 0, 0, socket.if_nametoindex(interface))
    body += b"".join(struct.pack("=HH", 8, kind) + packed for kind in (ifa_local, ifa_address))
    flags = nlm_f_request | nlm_f_ack | ((nlm_f_create | nlm_f_excl) if add else 0)
    header = struct.pack("=IHHII", 16 + len(body), rtm_newaddr if add else rtm_deladdr, flags, 1, 0)
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        sock.bind((0, 0))
        sock.send(header + body)
        reply = sock.recv(65536)
    kind = struct.unpack("=H", reply[4:6])[0]
    if kind != 2:  # NLMSG_ERROR carries the answer, 0 for success
        raise OSError(f"netlink: unexpected reply type {kind}")
    code = -struct.unpack("=i", reply[16:20])[0]
    if code == 0:
        return "added" if add else "removed"
    if add and code == errno.EEXIST:
        return "present"
    raise OSError(code, f"netlink {'add' if add else 'del'} {ip}/32 dev {interface}: {os.strerror(code)}")


def add_addresses(ips: list[str]) -> dict[str, str]:
    """Each host's address on lo unless this machine has it already; {ip: "added" | "present"}."""
    done = {}
    for ip in ips:
        done[ip] = "present" if is_local(ip) else netlink_address(ip, add=True)
        if not is_local(ip):
            raise RuntimeError(f"{ip} was added to lo but a socket still cannot bind it")
    return done


def processes(plan: dict) -> list[tuple[str, dict]]:
    """(host, pipeline entry) of the one distributed pipeline: the head first, then its headless stages."""
    found = [(host, p) for host, entry in plan["hosts"].items() for p in entry["pipelines"]]
    heads = [item for item in found if item[1].get("process") == "head"]
    rest = [item for item in found if item[1].get("process") == "headless"]
    if len(heads) != 1 or not rest or len(heads) + len(rest) != len(found):
        raise SystemExit(f"the render must hold one distributed pipeline (a head and headless stages), found "
                         f"{[(h, p['name'], p.get('process')) for h, p in found]}")
    return heads + rest


def one_machine_env(items: list[tuple[str, dict]]) -> dict[str, dict[str, str]]:
    """VLLM_PORT per process: the head keeps its slice, each headless process takes the next one."""
    out = {}
    for index, (_host, pipeline) in enumerate(items):
        low, high = pipeline["ports"]["zmq"]
        if index:
            out[pipeline["name"]] = {"VLLM_PORT": str(int(pipeline["environment"]["VLLM_PORT"]) + index * (high - low + 1))}
    return out


def listening_by_process(engines: dict[str, serving.Engine]) -> dict[str, list[str]]:
    """Each unit's listening TCP sockets as address:port, from /proc/net/tcp and its processes' descriptors."""
    sockets: dict[str, str] = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(name).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] != "0A":
                    continue
                address, port = fields[1].rsplit(":", 1)
                ip = socket.inet_ntoa(struct.pack("<I", int(address, 16))) if len(address) == 8 else f"[{address}]"
                sockets[fields[9]] = f"{ip}:{int(port, 16)}"
    out = {}
    for label, engine in engines.items():
        found = set()
        for pid in engine.session_pids():
            with contextlib.suppress(OSError):
                for fd in Path(f"/proc/{pid}/fd").iterdir():
                    with contextlib.suppress(OSError):
                        target = os.readlink(fd)
                        if target.startswith("socket:[") and target[8:-1] in sockets:
                            found.add(sockets[target[8:-1]])
        out[label] = sorted(found)
    return out


# --- the scenario -----------------------------------------------------------------------------


class Checker:
    """Check requests one after the other in the background, once started: when the pipeline answers again."""

    def __init__(self, pipeline: dict, model: str, zero: float, tag: str, engines: dict[str, serving.Engine]):
        self.pipeline, self.model, self.zero, self.tag, self.engines = pipeline, model, zero, tag, engines
        self.results: list[dict] = []
        self.go = threading.Event()
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        number = 0
        while not self.halt.is_set():
            if not self.go.wait(0.5):
                continue
            number += 1
            request_id = f"{_pd_evidence.CHECK_REQUEST_PREFIX}-{self.tag}-again{number}"
            # Where each log stood when the request left: its judgement reads only what came after, so the fault's
            # own failure lines (EngineDeadError and the like) do not count against a request sent after it.
            offsets = {name: len(engine.text()) for name, engine in self.engines.items()}
            sent = time.monotonic()
            answer = serving.chat(self.pipeline, self.model, request_id, "Say hello.", max_tokens=8, timeout=60)
            self.results.append({**answer, "sent_s": round(sent - self.zero, 2), "offsets": offsets,
                                 "ended_s": round(time.monotonic() - self.zero, 2), "outcome": faults.outcome(answer)})
            if not faults.ok(answer):
                self.halt.wait(0.5)

    def judge(self, result: dict) -> dict:
        text = "\n".join(engine.text()[result["offsets"][name]:] for name, engine in self.engines.items())
        return _pd_evidence.judge(text, result["request_id"])

    def first_ok(self, since_s: float) -> dict | None:
        return next((r for r in self.results if r["sent_s"] >= since_s and r["outcome"] == "ok"), None)


def wait_for(predicate, timeout: float, step: float = 0.5) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return round(time.monotonic() - started, 1)
        time.sleep(step)
    return None


def start_in_order(head: serving.Engine, rest: list[serving.Engine], stagger: bool, timeout: float) -> dict:
    """The deploy's order: the head, then each headless stage (after the head's prefill KV cache, with stagger)."""
    offset = len(head.text()) if head.launches else 0
    head.start()
    out: dict = {"stagger_s": None}
    if stagger:
        out["stagger_s"] = wait_for(lambda: STAGGER_LINE.search(head.text()[offset:]) or head.process.poll() is not None,
                                    timeout)
    for engine in rest:
        engine.start()
    out["headless_started_after_head_s"] = [round(engine.started - head.started, 2) for engine in rest]
    return out


def scenario(name: str, render: Path, logs: Path, args, deadline: float) -> dict:
    plan = json.loads((render / "plan.json").read_text())
    items = processes(plan)
    ips = sorted({plan["hosts"][host]["ip"] for host, _p in items})
    record: dict = {"scenario": name, "layout": plan["layout"], "connector": plan["backend"].get("kv_connector"),
                    "hosts": {host: plan["hosts"][host]["ip"] for host, _p in items},
                    "processes": [{"host": host, "name": p["name"], "process": p["process"], "stage_id": p["stage_id"],
                                   "unit": p["unit"], "argv": p["argv"]} for host, p in items]}
    engines: dict[str, serving.Engine] = {}
    try:
        record["addresses"] = add_addresses(ips)
        return run(name, render, logs, args, deadline, plan, items, record, engines)
    finally:
        # The deploy's stop order: headless stages first, then the head (GPU swept last).
        record["stopped"] = []
        for unit_name, engine in [*list(engines.items())[1:], *list(engines.items())[:1]]:
            engine.stop(sweep_gpu=engine is next(iter(engines.values())))
            record["stopped"].append(unit_name)
        for ip, how in record.get("addresses", {}).items():
            if how == "added":
                with contextlib.suppress(OSError):
                    netlink_address(ip, add=False)


def run(name: str, render: Path, logs: Path, args, deadline: float, plan: dict, items: list, record: dict,
        engines: dict) -> dict:
    """scenario()'s body; ``engines`` is filled in here (the head first) so that scenario() can stop them."""
    overrides = one_machine_env(items)
    record["one_machine_env"] = overrides
    pipelines = {p["name"]: serving.lay_out(render, plan, host, p["name"]) for host, p in items}
    venvs = {p["paths"]["venv"] for p in pipelines.values()}
    if len(venvs) != 1:
        raise SystemExit(f"the processes name different venvs {venvs}: one machine holds one")
    venv = serving.make_venv(Path(venvs.pop()))
    serving.fresh_home(plan["paths"]["engine_home"])
    serving.install_connector(plan, venv["purelib"])
    for _host, p in items:
        engines[p["name"]] = serving.Engine(pipelines[p["name"]], f"{name}-{p['name']}", logs,
                                            plan["paths"]["engine_home"], env_overrides=overrides.get(p["name"]))
    units = {p["name"]: faults.Unit(engines[p["name"]], faults.unit_settings(render / host / "systemd" / "vllm-omni@.service"))
             for host, p in items}
    (head_host, head_entry), *rest_items = items
    head = engines[head_entry["name"]]
    rest = [engines[p["name"]] for _host, p in rest_items]
    model = plan["served_model_name"]
    pipeline = pipelines[head_entry["name"]]

    def texts() -> str:
        return "\n".join(engine.text() for engine in engines.values())

    serving.log(f"{name}: starting {head_entry['unit']} on {head_host}, then "
                f"{', '.join(p['unit'] for _h, p in rest_items)} (addresses {record['addresses']}, {overrides})")
    started = time.monotonic()
    record["start"] = start_in_order(head, rest, args.stagger, min(args.ready_timeout, 300))
    ready = wait_ready(head, rest, args.ready_timeout - (time.monotonic() - started))
    record["ready"] = {**ready, "seconds_from_head_start": round(time.monotonic() - started, 1),
                       "headless_running": [e.process.poll() is None for e in rest]}
    serving.log(f"{name}: ready={record['ready']} start={record['start']}")
    record["registrations"] = re.findall(r"\[OmniMasterServer\] Stage \d+ replica \d+ registered from host \S+",
                                         head.text())[:4]
    record["listening"] = listening_by_process({"head": head, **{f"headless {i}": e for i, e in enumerate(rest)}})
    if not ready["ready"]:
        record["failure_lines"] = [line[:300] for line in texts().splitlines() if serving.FAILURE_LINES.search(line)][:12]
        return record
    record["requests"] = serve(pipeline, model, name, args.requests)
    record["summary"] = {group: serving.summary(record["requests"][group]) for group in ("one_at_a_time", "concurrent4")}
    time.sleep(1)  # the connector logs each hand-off as its request finishes
    verdicts = {r["request_id"]: _pd_evidence.judge(texts(), r["request_id"])["ok"]
                for group in ("one_at_a_time", "concurrent4") for r in record["requests"][group]}
    record["judged"] = {"requests": len(verdicts), "through_prefill_and_decode": sum(verdicts.values()),
                        "example": _pd_evidence.judge(texts(), next(iter(verdicts))) if verdicts else None}
    port = head_entry["ports"].get("bootstrap")
    if port:
        status, body = serving.http("GET", f"http://{head_entry['kv_ip']}:{port}/query", key=None, timeout=10)
        record["bootstrap_query"] = {"status": status, "body": body.decode(errors="replace")[:600]}
    serving.log(f"{name}: {json.dumps(record['summary'])[:300]} judged {record['judged']['through_prefill_and_decode']}"
                f" of {record['judged']['requests']}")
    if args.restart:
        record["restart"] = restart_in_deploy_order(args, head, head_entry, rest, units, pipeline, model, deadline)
        return record
    record["fault"] = kill_headless(args, head, head_entry, rest[0], rest_items[0][1], units, engines, pipeline,
                                    model, deadline)
    return record


def wait_ready(head: serving.Engine, rest: list[serving.Engine], timeout: float) -> dict:
    """/health 200 on the head; a headless stage that exits first fails the start at once (the head would wait
    for its registration until its own init timeout)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        for engine in rest:
            if engine.process.poll() is not None:
                return {"ready": False, "why": f"{engine.log_path.name}: exited with {engine.process.returncode}",
                        "seconds": round(time.monotonic() - head.started, 1)}
        if head.process.poll() is not None:
            return {"ready": False, "why": f"the head exited with {head.process.returncode}",
                    "seconds": round(time.monotonic() - head.started, 1)}
        status, _unused = serving.http("GET", head.pipeline["url"] + "/health", key=None, timeout=5)
        if status == 200:
            return {"ready": True, "seconds": round(time.monotonic() - head.started, 1)}
        if "initialization failed" in head.text():
            return {"ready": False, "why": "initialization failed", "seconds": round(time.monotonic() - head.started, 1)}
        time.sleep(1)
    return {"ready": False, "why": f"no /health 200 within {timeout:.0f}s", "seconds": round(timeout, 1)}


def serve(pipeline: dict, model: str, name: str, count: int) -> dict:
    rid = f"{_pd_evidence.CHECK_REQUEST_PREFIX}-{name}"
    out: dict = {"one_at_a_time": [serving.chat(pipeline, model, f"{rid}-short{i}", f"Count to {i + 3}.")
                                   for i in range(count)]}
    concurrent: list[dict] = []
    lock = threading.Lock()

    def worker(index: int) -> None:
        for j in range(max(1, count // 4)):
            answer = serving.chat(pipeline, model, f"{rid}-c{index}x{j}", f"{serving.LONG_PROMPT[:800]} Go {index}.")
            with lock:
                concurrent.append(answer)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    out["concurrent4"] = concurrent
    return out


def kill_headless(args, head: serving.Engine, head_entry: dict, victim: serving.Engine, victim_entry: dict,
                  units: dict, engines: dict, pipeline: dict, model: str, deadline: float) -> dict:
    """kill -9 (per --kill) of the headless stage under load, then recovery as systemd and the deploy would."""
    stage = victim_entry["stage_id"]
    targets = {"main": [victim.process.pid], "group": victim.session_pids(),
               "engine": [faults.stage_pid(victim, stage)]}[args.kill]
    if not targets or None in targets:
        return {"error": f"--kill {args.kill}: no process to kill in {victim_entry['unit']}"}
    load = faults.Load(pipeline, model)
    load.start()
    time.sleep(args.fault_after)
    kill = time.monotonic()
    for pid in targets:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    serving.log(f"span fault: kill -9 ({args.kill}) of {victim_entry['unit']}: {targets}")
    watch = faults.LogWatch({"head": head, "headless": victim}, kill)
    checker = Checker(pipeline, model, kill, "span", engines)
    head_unit, victim_unit = units[head_entry["name"]], units[victim_entry["name"]]
    events: dict = {}
    health: list[list] = []
    relaunch_at: float | None = None
    order: list[str] = []

    def now() -> float:
        return round(time.monotonic() - kill, 2)

    def healed(entry: dict, at: float) -> None:
        if entry is victim_entry:  # the stage started again: the next full answer counts from here
            events["headless_relaunched_s"] = at
            events.setdefault("relaunches", []).append(["headless (self-heal)", at])
        else:
            events.setdefault("relaunches", []).append(["head (self-heal)", at])
        order.append(f"{at}: self-heal restarted {entry['unit']}")
        checker.go.set()

    agents = (SelfHeal(args.self_heal, args.ready_timeout, head, head_entry, [(victim, victim_entry)], units,
                       victim.log_path.parent, kill, healed) if args.self_heal else None)
    while time.monotonic() < deadline - EST["stop"]:
        if agents:
            agents.tick()
        status, _unused = serving.http("GET", pipeline["url"] + "/health", key=None, timeout=2)
        if not health or health[-1][1] != status:
            health.append([round(now(), 1), status])
        watch.poll()
        if "headless_exit_s" not in events and victim.process.poll() is not None:
            events["headless_exit_s"], events["headless_returncode"] = now(), victim.process.returncode
            events["headless_leftovers"] = victim_unit.stop_leftovers()
            restarts = victim_unit.settings["Restart"] == "always"
            if restarts and "head_exit_s" not in events:
                relaunch_at = time.monotonic() + victim_unit.settings["RestartSec"]
            order.append(f"{now()}: headless unit's main process exited ({victim.process.returncode}); "
                         + (f"Restart=always: starts again in {victim_unit.settings['RestartSec']:.0f} s" if restarts
                            else f"Restart={victim_unit.settings['Restart']}: stays down"))
        elif (agents and relaunch_at is None and victim.process.poll() is not None and "head_exit_s" not in events
              and victim_unit.settings["Restart"] == "always"):
            # Exited again (a registration nobody answered): systemd starts it again after RestartSec, every time.
            relaunch_at = time.monotonic() + victim_unit.settings["RestartSec"]
            order.append(f"{now()}: headless unit's main process exited again ({victim.process.returncode}); "
                         f"starts again in {victim_unit.settings['RestartSec']:.0f} s")
        if "head_exit_s" not in events and head.process.poll() is not None:
            events["head_exit_s"], events["head_returncode"] = now(), head.process.returncode
            events["head_leftovers"] = head_unit.stop_leftovers()
            relaunch_at = None
            # The deploy's order for a whole distributed pipeline: headless stages stop, the head starts, then them.
            if victim.process.poll() is None:
                victim_unit.stop()
                order.append(f"{now()}: head exited ({head.process.returncode}): headless unit stopped first")
            wait = max(0.0, head_unit.settings["RestartSec"] - (time.monotonic() - kill - events["head_exit_s"]))
            time.sleep(wait)
            events["head_relaunched_s"] = now()
            start = start_in_order(head, [victim], args.stagger, max(0.0, deadline - time.monotonic() - 30))
            events["headless_relaunched_s"] = now()
            events["restart_stagger_s"] = start["stagger_s"]
            events.setdefault("relaunches", []).extend([["head", events["head_relaunched_s"]],
                                                        ["headless", events["headless_relaunched_s"]]])
            order.append(f"{events['head_relaunched_s']}: head started; {events['headless_relaunched_s']}: headless "
                         "started (the deploy's order)")
            checker.go.set()
        if relaunch_at is not None and time.monotonic() >= relaunch_at:
            relaunch_at = None
            events["headless_relaunched_s"] = now()
            events.setdefault("relaunches", []).append(["headless", events["headless_relaunched_s"]])
            victim.start()
            order.append(f"{now()}: headless unit started again (Restart=always after RestartSec)")
            checker.go.set()
        since = events.get("headless_relaunched_s")
        if since is not None and checker.first_ok(since):
            break
        time.sleep(0.5)
    else:
        events["gave_up"] = "the call's budget ran out before the pipeline answered in full again"
    since = events.get("headless_relaunched_s")
    first = checker.first_ok(since) if since is not None else None
    if first:
        events["first_ok_s"] = first["ended_s"]
        time.sleep(1)
        events["first_ok_judged"] = checker.judge(first)
        events["clients_first_ok_s"] = faults.first_client_ok(load, kill, since, EST["clients_after"],
                                                              deadline - EST["stop"])
    checker.halt.set()
    open_at_end = load.stop()
    hanging = load.still_open(kill)
    watch.poll()
    events["registered_again_s"] = watch.first("head: registered")
    events["head_detached_dead_replica_s"] = watch.first("head: detached")
    marks = [("kill", 0.0), ("headless exit", events.get("headless_exit_s")), ("head exit", events.get("head_exit_s")),
             ("headless relaunched", events.get("headless_relaunched_s")),
             ("registered again", events.get("registered_again_s")), ("first ok", events.get("first_ok_s"))]
    marks = sorted([m for m in marks if m[1] is not None], key=lambda m: m[1])
    if agents:
        events["self_heal"] = agents.report()
    return {"kill": args.kill, "killed": targets, "unit": victim_entry["unit"],
            "units": {name: {k: u.settings[k] for k in ("Restart", "RestartSec", "TimeoutStopSec")} for name, u in units.items()},
            "head_exited": "head_exit_s" in events, **events, "order": order, "health": health,
            **faults.client_view(load.snapshot(), kill, marks, open_at_end), "still_open_at_end": hanging,
            "checks_after_relaunch": [{k: r[k] for k in ("sent_s", "ended_s", "outcome", "error")} for r in checker.results][:20],
            "log_lines": watch.seen}


class SelfHeal:
    """The hosts' self-heal agents (roles/engine/files/vllm_omni_heal.py, its Agent class as it is), one per process of
    the pipeline, on this one machine: the agent's probes are real (the head's /health); systemd, which the device
    machine lacks, is what the harness already stands in for: a unit is active while its process runs (entered when
    it started), and a restart is the unit's stop then its start. Each restart is recorded, in seconds from the kill.
    """

    def __init__(self, interval: float, grace: float, head: serving.Engine, head_entry: dict,
                 parts: list[tuple[serving.Engine, dict]], units: dict, logs: Path, zero: float, on_restart):
        self.interval, self.zero, self.on_restart, self.units = interval, zero, on_restart, units
        self.engines = {head_entry["unit"]: (head, head_entry), **{e["unit"]: (engine, e) for engine, e in parts}}
        probe = head.pipeline["url"] + "/health"
        self.restarts: list[dict] = []
        self.agents = []
        for unit, (_engine, entry) in self.engines.items():
            config = {"enabled": True, "interval": interval, "after": 3, "max_restarts": 3, "window": 3600,
                      "probe_timeout": 5.0, "start_grace": grace, "port": 0, "address": "127.0.0.1",
                      "state_file": str(logs / f"self-heal-{entry['name']}.json"),
                      "pause_file": str(logs / "self-heal-pause-never"),
                      "watch": [{"pipeline": entry["name"], "unit": unit, "probe": probe,
                                 "process": "head" if entry is head_entry else "headless"}]}
            self.agents.append(vllm_omni_heal.Agent(config, unit_fn=self.unit_state, restart_fn=self.restart))
        self.next_tick = time.monotonic()

    def unit_state(self, unit: str) -> tuple[str, int]:
        engine, _entry = self.engines[unit]
        running = engine.process is not None and engine.process.poll() is None
        return ("active", int(engine.started * 1e6)) if running else ("inactive", 0)

    def restart(self, unit: str, hung: bool) -> None:
        engine, entry = self.engines[unit]
        began = round(time.monotonic() - self.zero, 2)
        watch = next(w for agent in self.agents for w in agent.watches if w.unit == unit)
        stop = None
        if watch.process == "head":
            # The head's unit stops as its ExecStop= and KillSignal=SIGKILL say (SIGTERM to the unit's processes,
            # SIGKILL once its HTTP server is done), not with the engine's own 30 s orchestrator join.
            api = urllib.parse.urlsplit(engine.pipeline["url"]).port
            stop = stop_watched(engine, api, self.units[entry["name"]].settings["TimeoutStopSec"], bounded=True)
        else:
            self.units[entry["name"]].stop()
        engine.start()
        self.restarts.append({"unit": unit, "process": watch.process, "at_s": began,
                              "started_s": round(time.monotonic() - self.zero, 2), "hung": hung,
                              "why": watch.state, **({"stop": stop} if stop else {})})
        serving.log(f"self-heal: restarted {unit} at +{began} s ({watch.state})")
        self.on_restart(entry, round(time.monotonic() - self.zero, 2))

    def tick(self) -> None:
        if time.monotonic() < self.next_tick:
            return
        self.next_tick += self.interval
        for agent in self.agents:
            agent.tick()

    def report(self) -> dict:
        return {"interval_s": self.interval, "restarts": self.restarts,
                "agents": [w.report() for agent in self.agents for w in agent.watches]}


def tcp_sockets(port: int, state: str) -> int:
    """How many TCP sockets have this local port in this state ("0A" listening, "01" established, "08" close-wait),
    on any local address (the API server may listen on all of them); only the head's API server has this port."""
    count = 0
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(name).read_text().splitlines()[1:]:
                fields = line.split()
                count += int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == state
    return count


def stop_watched(engine: serving.Engine, api: int | None, timeout_stop: float, bounded: bool) -> dict:
    """``systemctl stop`` of one unit, watched every 0.1 s: SIGTERM to every process of the unit; ``bounded``: once
    the API port neither listens nor holds a connection, SIGKILL to what is left (the head's ExecStop= and
    KillSignal=SIGKILL).
    With ``api`` (the API port): when it stops listening and when its last connection closes (the HTTP server is
    done). SIGKILL in any case after min(TimeoutStopSec, STOP_WATCH_CAP_S)."""
    cap = min(timeout_stop, STOP_WATCH_CAP_S)
    started = time.monotonic()
    watch = faults.LogWatch({"log": engine}, started)
    out: dict = {"processes": len(engine.session_pids())}
    with contextlib.suppress(OSError):
        os.killpg(engine.process.pid, signal.SIGTERM)
    while True:
        now = round(time.monotonic() - started, 2)
        watch.poll()
        if api and "listener_closed_s" not in out and not tcp_sockets(api, "0A"):
            out["listener_closed_s"] = now
        if api and "listener_closed_s" in out and "http_done_s" not in out and \
                not tcp_sockets(api, "01") and not tcp_sockets(api, "08"):  # established, or closed by the client only
            out["http_done_s"] = now
        if "main_exited_s" not in out and engine.process.poll() is not None:
            out["main_exited_s"] = now
        if "main_exited_s" in out and not engine.session_pids():
            out["all_exited_s"] = now
            break
        reason = ("the HTTP server is done" if bounded and "http_done_s" in out else
                  f"TimeoutStopSec ({cap:.0f} s here)" if now >= cap else None)
        if reason:
            out["sigkill_s"], out["sigkill_because"] = now, reason
            with contextlib.suppress(OSError):
                os.killpg(engine.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                engine.process.wait(timeout=10)
            while engine.session_pids() and time.monotonic() - started < cap + 10:
                time.sleep(0.05)
            out["all_exited_s"] = round(time.monotonic() - started, 2)
            break
        time.sleep(0.1)
    watch.poll()
    out["log_lines"] = watch.seen
    return out


def restart_in_deploy_order(args, head: serving.Engine, head_entry: dict, rest: list[serving.Engine], units: dict,
                            pipeline: dict, model: str, deadline: float) -> dict:
    """roles/engine/tasks/restart_distributed.yml on one machine: headless stages stop, the head stops (watched;
    --restart says how it ends), the head starts, the headless stages start; then one request, judged."""
    head_unit = units[head_entry["name"]]
    out: dict = {"mode": args.restart, "timeout_stop_sec": head_unit.settings["TimeoutStopSec"]}
    zero = time.monotonic()
    out["headless_stop"] = [stop_watched(engine, None, head_unit.settings["TimeoutStopSec"], bounded=False)
                            for engine in rest]
    out["head_stop_began_s"] = round(time.monotonic() - zero, 2)
    api = urllib.parse.urlsplit(pipeline["url"]).port
    out["head_stop"] = stop_watched(head, api, head_unit.settings["TimeoutStopSec"], bounded=args.restart == "bounded")
    out["stopped_s"] = round(time.monotonic() - zero, 2)
    serving.log(f"span restart ({args.restart}): stops {out['headless_stop']} / {out['head_stop']}")
    out["start"] = start_in_order(head, rest, args.stagger, max(0.0, min(300.0, deadline - time.monotonic() - 30)))
    ready = wait_ready(head, rest, max(0.0, deadline - time.monotonic() - EST["stop"] - EST["check"]))
    out["ready_again"] = {**ready, "s_from_first_stop": round(time.monotonic() - zero, 1)}
    if ready["ready"]:
        request_id = f"{_pd_evidence.CHECK_REQUEST_PREFIX}-restart-{args.restart}"
        offsets = {"head": len(head.text()), **{f"headless {i}": len(e.text()) for i, e in enumerate(rest)}}
        answer = serving.chat(pipeline, model, request_id, "Say hello.", max_tokens=8, timeout=60)
        time.sleep(1)  # the connector logs the hand-off as the request finishes
        text = "\n".join(engine.text()[offsets[name]:] for name, engine in
                         {"head": head, **{f"headless {i}": e for i, e in enumerate(rest)}}.items())
        out["served_again"] = {"outcome": faults.outcome(answer), "judged": _pd_evidence.judge(text, request_id),
                               "s_from_first_stop": round(time.monotonic() - zero, 1)}
    return out


def estimate(head_dies: bool = False, restart: bool = False) -> dict:
    steps = [("lay out, addresses, venv", EST["setup"]), ("head, then headless, to /health 200", EST["ready"]),
             ("requests, judged", EST["requests"]), ("load before the kill", EST["lead"]),
             ("RestartSec, then the headless stage's start", EST["restart_sec"] + EST["stage_start"]),
             ("registration and the first full answer", EST["registration"] + EST["check"] + EST["clients_after"]),
             ("stop: headless, then head", EST["stop"])]
    if head_dies:
        steps.append(("the head's own restart (if it exits)", EST["head_restart"]))
    if restart:
        steps = [*steps[:3], ("headless stop, then the head's (watched)", EST["stop"] + EST["head_stop"]),
                 ("head, then headless, to /health 200 again", EST["ready"]), ("one request, judged", EST["check"]),
                 ("stop: headless, then head", EST["stop"] + EST["head_stop"])]
    return {"steps": [{"step": s, "seconds": t} for s, t in steps], "total_s": sum(t for _s, t in steps)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("scenarios", nargs=1, help="NAME=RENDER_DIR (a render of pd-span-text.yml)")
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    parser.add_argument("--ready-timeout", type=float, default=400)
    parser.add_argument("--requests", type=int, default=8, help="check requests one at a time (and as many from 4 clients)")
    parser.add_argument("--kill", choices=("main", "engine", "group"), default="main")
    parser.add_argument("--fault-after", type=float, default=8, help="seconds of load before the kill")
    parser.add_argument("--restart", choices=("natural", "bounded"),
                        help="instead of the kill: a restart in the deploy's order, the head's stop watched (item 5)")
    parser.add_argument("--stagger", action=argparse.BooleanOptionalAction, default=True,
                        help="start the headless stage once the head's prefill engine holds its KV cache")
    parser.add_argument("--self-heal", type=float, default=0, metavar="SECONDS",
                        help="after the kill, the hosts' self-heal agents probe every SECONDS and restart what they "
                             "judge (instead of waiting for a person); 0: off")
    parser.add_argument("--compile-bytecode", action="store_true")
    parser.add_argument("--budget", type=float, default=570, help="seconds this call may take (the tool stops at 600)")
    parser.add_argument("--estimate", action="store_true", help="print the steps and their estimated seconds only")
    args = parser.parse_args()
    if args.estimate and args.restart:
        plan_out = {"if the head lives": estimate(restart=True)}
        plan_out["fits"] = plan_out["if the head lives"]["total_s"] <= args.budget
        print(json.dumps(plan_out))
        return 0
    if args.estimate:
        plan_out = {"if the head lives": estimate(), "if the head exits too": estimate(head_dies=True)}
        plan_out["fits"] = plan_out["if the head exits too"]["total_s"] <= args.budget
        print(json.dumps(plan_out))
        return 0
    deadline = time.monotonic() + args.budget
    name, _sep, render = args.scenarios[0].partition("=")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logs = serving.STAGE / "span-logs"
    logs.mkdir(parents=True, exist_ok=True)
    for old in logs.glob("*.log"):
        old.unlink()
    results: dict = {"machine": serving.nvidia_smi(
        "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader")}
    if args.compile_bytecode:
        results["compile_bytecode"] = serving.compile_bytecode()
    try:
        results[name] = scenario(name, Path(render), logs, args, deadline)
    finally:
        (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
        serving.pack_logs(logs, out / "logs.tar.gz")
    for problem in serving.check_out(out):
        serving.log(f"WARNING: {problem}")
    fault = results[name].get("fault") or {}
    if args.restart:
        again = (results[name].get("restart") or {}).get("served_again") or {}
        return 0 if results[name].get("ready", {}).get("ready") and again.get("outcome") == "ok" else 1
    return 0 if results[name].get("ready", {}).get("ready") and fault.get("first_ok_s") is not None else 1


if __name__ == "__main__":
    sys.exit(main())
