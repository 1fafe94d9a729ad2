# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""vllm_omni.serve's self-heal agent: one per engine host (vllm-omni-heal.service), from the plan's heal.json.

Every ``interval`` seconds it looks at each engine process of this host and restarts the one that is up but cannot
serve, so that nobody has to at 3 a.m.:

* a single-process pipeline or a distributed pipeline's head whose own /health fails ``after`` times in a row (an
  HTTP error such as vLLM-Omni's 503 once its orchestrator errored, or no answer within the probe's timeout: a hung
  process, killed before the restart);
* a headless stage whose head has not listened for ``after`` probes in a row, after it was seen answering since the
  stage started: the head was restarted (by its own agent, on its host) and waits for its stages to register again,
  which a headless process started before it never does. While the head answers but fails, the head's own agent
  acts, not this one.

A unit that is not active is left alone (a deliberate ``systemctl stop``, or systemd restarting it itself); a unit
that started and has not served yet is given ``start_grace`` seconds; nothing is restarted while the pause file
says a deploy or upgrade is working on the host. The n-th restart of a process within ``window`` seconds waits
for ``after`` * 2**n failed probes; at ``max_restarts`` within the window the agent gives up on it (a metric and
an alert say so) until it serves again. Restarts are counted in state.json (read by the status playbook) and on
/metrics (Prometheus; the alerts VllmOmniSelfHealed and VllmOmniSelfHealGaveUp). With ``enabled`` false it watches
and reports what it would do, and restarts nothing.

Standard library only: it runs on the host's own python3 (3.9 and later), as root (it restarts units).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

OK, FAILING, DOWN = "ok", "failing", "down"


def say(line: str) -> None:
    print(line, flush=True)


def probe(url: str, timeout: float) -> tuple[str, str]:
    """(OK | FAILING | DOWN, what happened). DOWN: nothing listens (refused, reset, no route); FAILING: an HTTP error
    or no answer in time (a listener that hangs)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (the plan's http URL)
            return (OK, "200") if response.status == 200 else (FAILING, f"HTTP {response.status}")
    except urllib.error.HTTPError as error:
        return FAILING, f"HTTP {error.code}"
    except TimeoutError:
        return FAILING, f"no answer within {timeout:g} s"
    except (urllib.error.URLError, ConnectionError, http.client.HTTPException, OSError) as error:
        reason = getattr(error, "reason", error)
        if isinstance(reason, (socket.timeout, TimeoutError)):
            return FAILING, f"no answer within {timeout:g} s"
        return DOWN, f"not listening ({reason})"


def unit_state(unit: str) -> tuple[str, int]:
    """(ActiveState, ActiveEnterTimestampMonotonic in microseconds)."""
    out = subprocess.run(["systemctl", "show", "-p", "ActiveState", "-p", "ActiveEnterTimestampMonotonic", unit],
                         capture_output=True, text=True, check=False).stdout
    values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return values.get("ActiveState", "unknown"), int(values.get("ActiveEnterTimestampMonotonic") or 0)


def restart_unit(unit: str, hung: bool) -> None:
    """A hung process gets SIGKILL first (it would sit out its stop timeout); the start limit is reset, as the
    deploy's deliberate restarts do, so that a self-heal never lands on a refused start."""
    if hung:
        subprocess.run(["systemctl", "kill", "--signal=SIGKILL", unit], check=False)
    subprocess.run(["systemctl", "reset-failed", unit], check=False)
    subprocess.run(["systemctl", "restart", "--no-block", unit], check=False)


class Watch:
    """One engine process of this host and what the agent knows of it."""

    def __init__(self, entry: dict, saved: dict):
        self.pipeline, self.unit, self.process = entry["pipeline"], entry["unit"], entry["process"]
        self.url = entry["probe"]
        self.restarts_total = int(saved.get("restarts_total", 0))
        self.recent = [float(t) for t in saved.get("recent", [])]
        self.last = saved.get("last")
        self.state, self.streak, self.gave_up = "unknown", 0, False
        self.entered, self.served_since_start = None, False
        self.said = None  # the last state line printed, so the journal tells changes only

    def report(self) -> dict:
        return {"pipeline": self.pipeline, "unit": self.unit, "process": self.process, "state": self.state,
                "failed_probes": self.streak, "gave_up": self.gave_up, "restarts_total": self.restarts_total,
                "recent": self.recent, "last": self.last}


class Agent:
    def __init__(self, config: dict, clock=time.time, monotonic=time.monotonic, probe_fn=probe, unit_fn=unit_state,
                 restart_fn=restart_unit):
        self.config = config
        self.clock, self.monotonic = clock, monotonic
        self.probe, self.unit_state, self.restart = probe_fn, unit_fn, restart_fn
        saved = self._load()
        self.watches = [Watch(entry, saved.get(entry["unit"], {})) for entry in config["watch"]]
        self.paused, self.unsaved = False, False
        self.lock = threading.Lock()

    def _load(self) -> dict:
        try:
            with open(self.config["state_file"], encoding="utf-8") as handle:
                return {w["unit"]: w for w in json.load(handle).get("watch", [])}
        except (OSError, ValueError, KeyError, TypeError):
            return {}

    def _save(self) -> None:
        path = self.config["state_file"]
        document = {"at": round(self.clock(), 3), "enabled": self.config["enabled"], "paused": self.paused,
                    "watch": [w.report() for w in self.watches]}
        temporary = f"{path}.tmp"
        try:
            with open(temporary, "w", encoding="utf-8") as handle:
                json.dump(document, handle, indent=1)
            os.replace(temporary, path)
        except OSError as error:  # its directory gone (an uninstall under way): watching goes on, unrecorded
            if not self.unsaved:
                say(f"self-heal: cannot write {path} ({error}); the status playbook will not see this host's record")
            self.unsaved = True
        else:
            self.unsaved = False

    def _paused(self) -> bool:
        """The pause file holds the Unix time it expires at: a deploy that died cannot switch healing off for good."""
        try:
            with open(self.config["pause_file"], encoding="utf-8") as handle:
                return float(handle.read().strip() or 0) > self.clock()
        except (OSError, ValueError):
            return False

    def tick(self) -> None:
        with self.lock:
            self.paused = self._paused()
            for watch in self.watches:
                self._look(watch)
                line = f"{watch.unit}: {watch.state}"
                if line != watch.said:
                    say(f"self-heal: {line}" + (f" ({watch.streak} failed probes)" if watch.streak else ""))
                    watch.said = line
            self._save()

    def _look(self, watch: Watch) -> None:
        active, entered = self.unit_state(watch.unit)
        if active != "active":
            watch.state, watch.streak = ("stopped" if active in ("inactive", "failed") else active), 0
            return
        if entered != watch.entered:  # a new start: it has to serve before failures count
            watch.entered, watch.served_since_start, watch.streak = entered, False, 0
        result, detail = self.probe(watch.url, self.config["probe_timeout"])
        if result == OK:
            watch.state, watch.streak, watch.served_since_start, watch.gave_up = "serving", 0, True, False
            return
        if watch.process == "headless" and result == FAILING:
            # A head that answers (even with an error) is the one this stage started against: once it goes down,
            # it was restarted, and this stage must follow (a headless process never registers again by itself).
            watch.served_since_start = True
        if self.paused:
            watch.state, watch.streak = "paused (a deploy is working on this host)", 0
            return
        age = self.monotonic() - entered / 1e6
        if not watch.served_since_start and age < self.config["start_grace"]:
            watch.state = "starting"
            return
        if watch.process == "headless" and result != DOWN:
            # The head answers and fails: its own agent restarts it; this process follows once it is down.
            watch.state, watch.streak = f"waiting: its head fails ({detail}), the head's host acts", 0
            return
        watch.streak += 1
        what = "its head" if watch.process == "headless" else "/health"
        watch.state = f"failing: {what} {detail}"
        self._maybe_restart(watch, detail, hung=result == FAILING and "no answer" in detail)

    def _maybe_restart(self, watch: Watch, detail: str, hung: bool) -> None:
        now = self.clock()
        watch.recent = [t for t in watch.recent if now - t < self.config["window"]]
        needed = self.config["after"] * 2 ** len(watch.recent)
        if watch.streak < needed:
            return
        if len(watch.recent) >= self.config["max_restarts"]:
            if not watch.gave_up:
                say(f"self-heal: giving up on {watch.unit}: {len(watch.recent)} restarts within "
                    f"{self.config['window']} s and it still fails ({detail}); a person has to look")
            watch.gave_up, watch.state = True, f"gave up: {detail}"
            return
        what = ("its head is down" if watch.process == "headless" else f"/health failed {watch.streak} times in a row")
        if not self.config["enabled"]:
            watch.state = f"would restart (self-heal is off): {what} ({detail})"
            return
        say(f"self-heal: restarting {watch.unit} (pipeline {watch.pipeline}, {watch.process}): {what} ({detail}); "
            f"restart {len(watch.recent) + 1} of at most {self.config['max_restarts']} in {self.config['window']} s")
        self.restart(watch.unit, hung)
        watch.recent.append(now)
        watch.restarts_total += 1
        watch.last = {"at": round(now, 3), "reason": f"{what} ({detail})"}
        watch.streak, watch.state = 0, "restarted"

    def metrics(self) -> str:
        with self.lock:
            lines = ["# HELP vllm_omni_self_heal_enabled 1 when the agent may restart, 0 when it only watches.",
                     "# TYPE vllm_omni_self_heal_enabled gauge",
                     f"vllm_omni_self_heal_enabled {int(bool(self.config['enabled']))}",
                     "# HELP vllm_omni_self_heal_paused 1 while a deploy or upgrade works on this host.",
                     "# TYPE vllm_omni_self_heal_paused gauge", f"vllm_omni_self_heal_paused {int(self.paused)}"]
            series = (("restarts_total", "counter", "Restarts the agent made of this engine process.",
                       lambda w: w.restarts_total),
                      ("gave_up", "gauge", "1 when the agent gave up restarting this process (too many restarts).",
                       lambda w: int(w.gave_up)),
                      ("failed_probes", "gauge", "Failed probes in a row now.", lambda w: w.streak),
                      ("serving", "gauge", "1 when the process's probe last succeeded.",
                       lambda w: int(w.state == "serving")))
            for name, kind, text, value in series:
                lines += [f"# HELP vllm_omni_self_heal_{name} {text}", f"# TYPE vllm_omni_self_heal_{name} {kind}"]
                for w in self.watches:
                    labels = f'pipeline="{w.pipeline}",unit="{w.unit}",process="{w.process}"'
                    lines.append(f"vllm_omni_self_heal_{name}{{{labels}}} {value(w)}")
            return "\n".join(lines) + "\n"


def serve_metrics(agent: Agent, address: str, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = agent.metrics().encode() if self.path.split("?")[0] == "/metrics" else b""
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # Prometheus scrapes every 15 s: not the journal's business
            return

    server = ThreadingHTTPServer((address, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} HEAL_JSON", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as handle:
        config = json.load(handle)
    agent = Agent(config)
    serve_metrics(agent, config["address"], config["port"])
    say(f"self-heal: watching {', '.join(w.unit for w in agent.watches) or 'nothing'} every {config['interval']} s "
        f"({'restarts on' if config['enabled'] else 'watch only: vllm_omni_self_heal is false'})")
    while True:
        started = time.monotonic()
        agent.tick()
        time.sleep(max(0.0, config["interval"] - (time.monotonic() - started)))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
