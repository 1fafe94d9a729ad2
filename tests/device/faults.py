"""Faults under load and the time to serve again, shared by the device scripts (issue 25, item 4).

Standard library only (it runs with the device machine's own python3). Used by
``tests/device/bench_pd_vs_aggregated.py`` (a stage of a one-process pipeline killed, the pipeline relaunched
as its unit's ``Restart=always`` would) and ``tests/device/span_serving.py`` (the headless process of a
pipeline spanning two inventory hosts killed, and restarted in the deploy's order).

Every time here is in seconds from the kill. What the clients saw is kept three ways: every request in flight
at the kill, the requests after it (capped, the count kept), and ``runs``: consecutive requests with the same
outcome folded into one line, which is how a reader sees "4 cut streams, then 320 refused in 40 s, then ok".

The device machine has no systemd, so ``Unit`` does what systemd would do with the engine unit
(``vllm-omni@.service``): when the main process exits, the rest of its control group gets SIGTERM, then SIGKILL
after ``TimeoutStopSec`` (``KillMode=control-group``, the default; the unit's session stands in for its cgroup),
and with ``Restart=always`` the same argv and environment start again ``RestartSec`` later.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pd_serving as serving
import sandbox  # the engine unit's [Service] directives, as sandbox.py reads them

sys.path.insert(0, str(serving.REPO / "plugins" / "plugin_utils" / "runtime"))
import _pd_evidence

# systemd's defaults where a unit does not say (systemd.service(5)); the engine unit says all three.
UNIT_DEFAULTS = {"Restart": "no", "RestartSec": 0.1, "TimeoutStopSec": 90.0}
# systemd waits TimeoutStopSec (120 s in the engine unit) for leftovers to go; device seconds are few, so the
# wait is capped here and the record says so when the cap was reached.
LEFTOVER_WAIT_CAP_S = 30.0
# A client that has not heard anything for this long is reported as hanging, not as failing fast.
FAST_S = 2.0


def seconds(value: str) -> float:
    """A systemd time span as the engine unit writes it: "15", "15s", "2min", "1min 30s"."""
    total, found = 0.0, False
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)\s*(ms|s|sec|min|m|h)?", value):
        found = True
        total += float(number) * {"ms": 0.001, "min": 60, "m": 60, "h": 3600}.get(unit, 1)
    if not found:
        raise ValueError(f"not a systemd time span: {value!r}")
    return total


def unit_settings(unit_path: Path) -> dict:
    """Restart, RestartSec and TimeoutStopSec of a rendered engine unit (the last assignment wins, as in systemd)."""
    found = sandbox.directives(unit_path)
    out = dict(UNIT_DEFAULTS)
    for key in out:
        if found.get(key):
            out[key] = found[key][-1] if key == "Restart" else seconds(found[key][-1])
    out["unit"] = str(unit_path)
    return out


# --- what a client saw ------------------------------------------------------------------------


def outcome(result: dict) -> str:
    """One word or two for what a streamed chat completion got."""
    status, error = result.get("status"), result.get("error") or ""
    if status == 200:
        if error:
            return "stream error" if error.startswith("stream error") else "stream broken"
        if result.get("chunks", 0) == 0:
            return "empty stream"
        return "ok" if result.get("finish_reason") else "cut stream"
    if status is not None:
        return f"http {status}"
    lowered = error.lower()
    if "refused" in lowered:
        return "refused"
    if "timed out" in lowered or "timeout" in lowered:
        return "client timeout"
    if "reset" in lowered or "closed" in lowered or "remotedisconnected" in lowered:
        return "connection dropped"
    return "no answer"


def ok(result: dict) -> bool:
    return outcome(result) == "ok"


def shown(item: dict, zero: float) -> dict:
    return {"kind": item["kind"], "started_s": round(item["started"] - zero, 2), "ended_s": round(item["ended"] - zero, 2),
            "seconds": round(item["ended"] - item["started"], 2), "outcome": outcome(item), "status": item["status"],
            "chunks": item["chunks"], "error": (item["error"] or "")[:160] or None,
            "finish_reason": item.get("finish_reason")}


def runs(items: list[dict]) -> list[dict]:
    """Requests in the order they were sent, consecutive ones with the same outcome folded together."""
    folded: list[dict] = []
    for item in sorted(items, key=lambda entry: entry["started_s"]):
        last = folded[-1] if folded else None
        if last and last["outcome"] == item["outcome"]:
            last["n"] += 1
            last["to_s"] = item["started_s"]
            last["longest_s"] = max(last["longest_s"], item["seconds"])
            continue
        folded.append({"outcome": item["outcome"], "n": 1, "from_s": item["started_s"], "to_s": item["started_s"],
                       "longest_s": item["seconds"], "example": item["error"]})
    for entry in folded:
        entry["answered"] = "fast" if entry["longest_s"] < FAST_S else "slowly"
    return folded


def phases(items: list[dict], marks: list[tuple[str, float | None]]) -> list[dict]:
    """Requests sent between consecutive marks ("kill" 0, "server exit" 5.0, ...), outcomes counted per phase."""
    points = [(name, at) for name, at in marks if at is not None]
    out = []
    for index, (name, at) in enumerate(points):
        until = points[index + 1][1] if index + 1 < len(points) else float("inf")
        inside = [i for i in items if at <= i["started_s"] < until]
        counts: dict[str, int] = {}
        for item in inside:
            counts[item["outcome"]] = counts.get(item["outcome"], 0) + 1
        out.append({"from": name, "from_s": at, "until_s": None if until == float("inf") else until,
                    "requests": len(inside), "outcomes": counts,
                    "longest_s": max((i["seconds"] for i in inside), default=None)})
    return out


class Load:
    """``clients`` streaming clients (long answers), each sending again at once after an answer and 0.5 s after a
    failure, plus a probe (a short request every ``probe_every`` s): the traffic a fault happens under."""

    def __init__(self, pipeline: dict, model: str, clients: int = 4, max_tokens: int = 256,
                 client_timeout: float = 150, probe_every: float = 10, probe_timeout: float = 30, tag: str = "fault"):
        self.pipeline, self.model, self.tag = pipeline, model, tag
        self.clients, self.max_tokens, self.client_timeout = clients, max_tokens, client_timeout
        self.probe_every, self.probe_timeout = probe_every, probe_timeout
        self.records: list[dict] = []
        self.open: dict[str, tuple[float, str]] = {}  # request id -> (sent, kind): answers still awaited
        self.lock = threading.Lock()
        self.halt = threading.Event()
        self.threads: list[threading.Thread] = []

    def _client(self, index: int) -> None:
        prompt = "Tell me a long story about a lighthouse keeper. " * 20
        number = 0
        while not self.halt.is_set():
            number += 1
            started = time.monotonic()
            request_id = f"{self.tag}-c{index}-{number}"
            with self.lock:
                self.open[request_id] = (started, "client")
            result = serving.chat(self.pipeline, self.model, request_id, prompt, max_tokens=self.max_tokens,
                                  timeout=self.client_timeout)
            with self.lock:
                self.open.pop(request_id, None)
                self.records.append({**result, "started": started, "ended": time.monotonic(), "kind": "client"})
            if not ok(result):
                self.halt.wait(0.5)  # a client that fails fast retries, but not in a tight loop

    def _probe(self) -> None:
        number = 0
        while not self.halt.is_set():
            number += 1
            started = time.monotonic()
            request_id = f"{self.tag}-probe-{number}"
            with self.lock:
                self.open[request_id] = (started, "probe")
            result = serving.chat(self.pipeline, self.model, request_id, "hi", max_tokens=8, timeout=self.probe_timeout)
            with self.lock:
                self.open.pop(request_id, None)
                self.records.append({**result, "started": started, "ended": time.monotonic(), "kind": "probe"})
            self.halt.wait(max(0.0, self.probe_every - (time.monotonic() - started)))

    def start(self) -> None:
        self.threads = [threading.Thread(target=self._client, args=(index,), daemon=True)
                        for index in range(self.clients)]
        self.threads.append(threading.Thread(target=self._probe, daemon=True))
        for thread in self.threads:
            thread.start()

    def stop(self, grace: float = 2.0) -> int:
        """Stop sending; the number of requests still open after ``grace`` seconds (hanging clients)."""
        self.halt.set()
        deadline = time.monotonic() + grace
        for thread in self.threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        return sum(1 for thread in self.threads if thread.is_alive())

    def snapshot(self) -> list[dict]:
        with self.lock:
            return list(self.records)

    def still_open(self, zero: float) -> list[dict]:
        """Requests sent and not answered yet (at stop: the ones that hang), with their age in seconds."""
        now = time.monotonic()
        with self.lock:
            return [{"kind": kind, "request_id": rid, "started_s": round(sent - zero, 2), "open_for_s": round(now - sent, 2)}
                    for rid, (sent, kind) in sorted(self.open.items(), key=lambda item: item[1][0])]


def first_client_ok(load: Load, zero: float, since_s: float | None, wait: float, deadline: float) -> float | None:
    """Seconds from ``zero`` to the end of the first load request sent after ``since_s`` that answered in full,
    waiting up to ``wait`` s for one (a client's long answer takes a while)."""
    if since_s is None:
        return None
    until = min(time.monotonic() + wait, deadline)
    while True:
        done = [r["ended"] - zero for r in load.snapshot() if r["started"] - zero >= since_s and ok(r)]
        if done or time.monotonic() >= until:
            return round(min(done), 2) if done else None
        time.sleep(0.5)


def client_view(records: list[dict], kill: float, marks: list[tuple[str, float | None]], open_at_end: int,
                cap: int = 200) -> dict:
    """What clients saw, around a kill at monotonic time ``kill``: the fault record's client part."""
    before = [shown(r, kill) for r in records if r["ended"] < kill]
    in_flight = [shown(r, kill) for r in records if r["started"] < kill <= r["ended"]]
    after = [shown(r, kill) for r in records if r["started"] >= kill]
    return {"completed_before_kill": sum(1 for r in before if r["outcome"] == "ok"),
            "in_flight_at_kill": in_flight, "after_kill": after[:cap], "after_kill_total": len(after),
            "client_requests_still_open_at_end": open_at_end,
            "runs": runs(in_flight + after), "phases": phases(in_flight + after, marks)}


# --- the processes ----------------------------------------------------------------------------


def alive(pid: int) -> bool:
    """Running: a zombie (dead, not yet reaped by whoever inherited it) does not count."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def stage_pid(engine: serving.Engine, stage: int, since: int = 0) -> int | None:
    """The PID of a stage's engine-core process, as its own log lines name it (after ``since`` characters of the
    log: a relaunch logs new PIDs), if it is alive and in the engine unit's session."""
    found = re.findall(rf"\(StageEngineCoreProc_stage{stage}_replica\d+ pid=(\d+)\)", engine.text()[since:])
    for pid in reversed([int(p) for p in found]):
        with contextlib.suppress(OSError):
            if os.getsid(pid) == engine.process.pid:  # each unit runs in a session of its own
                return pid
    return None


class Unit:
    """What systemd does with one engine unit whose main process exits (see the module docstring)."""

    def __init__(self, engine: serving.Engine, settings: dict):
        self.engine, self.settings = engine, settings

    def stop_leftovers(self) -> dict:
        """KillMode=control-group: SIGTERM to what is left of the unit, SIGKILL after TimeoutStopSec (capped)."""
        started = time.monotonic()
        sid = self.engine.process.pid
        left = serving.session_pids(sid)
        record = {"leftovers": left, "sigkill": []}
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        wait = min(self.settings["TimeoutStopSec"], LEFTOVER_WAIT_CAP_S)
        while serving.session_pids(sid) and time.monotonic() - started < wait:
            time.sleep(0.2)
        for pid in serving.session_pids(sid):
            record["sigkill"].append(pid)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if record["sigkill"] and wait < self.settings["TimeoutStopSec"]:
            record["note"] = (f"leftovers still there after {wait:.0f} s: SIGKILL now, where systemd waits "
                              f"TimeoutStopSec={self.settings['TimeoutStopSec']:.0f} s")
        record["seconds"] = round(time.monotonic() - started, 2)
        return record

    def stop(self) -> None:
        """``systemctl stop``: SIGTERM to the whole unit, then SIGKILL (the engine's own stop, GPU left alone)."""
        self.engine.stop(sweep_gpu=False)


LOG_PATTERNS = {
    # vLLM-Omni 0.26's own messages (engine/stage_engine_startup.py, membership_controller.py, orchestrator.py)
    "registered": r"\[OmniMasterServer\] Stage \d+ replica \d+ registered",
    "attached": r"\[MembershipController\] attached remote replica",
    "detached": r"\[MembershipController\] detached replica",
    "replica disappeared": r"stage replica disappeared",
    "no UP replica": r"no UP replica for stage",
    "engine dead": r"EngineDeadError|is dead",
    "headless shutting down": r"\[Headless\] Shutting down stage",
    "server finished": r"Finished server process",
    "shutting down clients": r"Shutting down all \d+ client",
    # engine/async_omni_engine.py's shutdown: the join a distributed head's membership watcher holds up (30 s)
    "orchestrator shutdown": r"\[AsyncOmniEngine\] Shutting down Orchestrator",
    "orchestrator join timed out": r"Orchestrator did not stop within",
}


class LogWatch:
    """When each line of interest first appeared in a log after a point, in seconds from ``zero``."""

    def __init__(self, engines: dict[str, serving.Engine], zero: float):
        self.engines, self.zero = engines, zero
        self.offsets = {name: len(engine.text()) for name, engine in engines.items()}
        self.seen: dict[str, dict] = {}

    def poll(self) -> None:
        now = round(time.monotonic() - self.zero, 2)
        for name, engine in self.engines.items():
            text = engine.text()[self.offsets[name]:]
            for label, pattern in LOG_PATTERNS.items():
                key = f"{name}: {label}"
                if key in self.seen:
                    continue
                found = re.search(pattern, text)
                if found:
                    line_start = text.rfind("\n", 0, found.start()) + 1
                    line_end = text.find("\n", found.end())
                    self.seen[key] = {"at_s": now, "line": text[line_start:line_end if line_end >= 0 else None][:240]}

    def first(self, key: str) -> float | None:
        return (self.seen.get(key) or {}).get("at_s")


def serve_again(pipeline: dict, model: str, zero: float, deadline: float, texts, tag: str,
                health: list | None = None) -> dict:
    """After a relaunch: seconds from ``zero`` to /health 200, then to the first chat completion that answers in
    full (a check request, judged prefill -> decode from ``texts()`` where the pipeline is PD)."""
    out: dict = {"health_200_s": None, "first_ok_s": None, "attempts": 0}
    number = 0
    while time.monotonic() < deadline:
        if out["health_200_s"] is None:
            status, _unused = serving.http("GET", pipeline["url"] + "/health", key=None, timeout=2)
            if health is not None and (not health or health[-1][1] != status):
                health.append([round(time.monotonic() - zero, 1), status])
            if status != 200:
                time.sleep(0.5)
                continue
            out["health_200_s"] = round(time.monotonic() - zero, 2)
        number += 1
        request_id = f"{_pd_evidence.CHECK_REQUEST_PREFIX}-{tag}-again{number}"
        answer = serving.chat(pipeline, model, request_id, "Say hello.", max_tokens=8, timeout=60)
        out["attempts"] = number
        if ok(answer):
            out["first_ok_s"] = round(time.monotonic() - zero, 2)
            out["first_ok"] = {k: answer.get(k) for k in ("request_id", "status", "ttft_s", "chunks", "finish_reason")}
            time.sleep(1)  # the connector logs the hand-off lines as the request finishes
            out["judged"] = _pd_evidence.judge(texts(), request_id)
            return out
        out["last_failure"] = {"outcome": outcome(answer), "error": (answer.get("error") or "")[:200]}
        time.sleep(1)
    out["gave_up"] = "deadline reached before a chat completion answered in full"
    return out
