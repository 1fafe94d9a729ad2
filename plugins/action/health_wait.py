# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""Action for vllm_omni.serve.health_wait (documentation in plugins/modules): repeat the module's one look
on the host until every target answers 200, print what each is doing meanwhile, fail with the journal."""

from __future__ import annotations

import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.vllm_omni.serve.plugins.module_utils._action_options import OptionsError, checked_options, refusal
from ansible_collections.vllm_omni.serve.plugins.module_utils._health import ARGUMENT_SPEC, incomplete
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime._progress import (
    health_wait_line,
    pause_before_next_look,
    stall_message,
    start_progress,
)

display = Display()
PROGRESS_JOURNAL_LINES = 20


class Progress:
    """When each waiting target last made progress (start_progress changed); which have gone ``stall_timeout``
    seconds without (0: never)."""

    def __init__(self, stall_timeout: int):
        self.stall_timeout = stall_timeout
        self.last: dict[str, tuple[str, float]] = {}  # target name -> (what it had got to, since when)

    def stalled(self, waiting: list[dict], elapsed: float) -> list[tuple[dict, float]]:
        found = []
        for target in waiting:
            now = start_progress(target["journal"])
            was, since = self.last.get(target["name"], (None, elapsed))
            if now != was:
                since = elapsed
            self.last[target["name"]] = (now, since)
            if self.stall_timeout > 0 and elapsed - since >= self.stall_timeout:
                found.append((target, elapsed - since))
        return found


class ActionModule(ActionBase):
    _supports_check_mode = True

    def _look(self, args: dict, journal_lines: int, task_vars: dict) -> dict:
        return self._execute_module(module_name="vllm_omni.serve.health_wait", task_vars=task_vars,
                                    module_args={**args, "journal_lines": journal_lines})

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        host = (task_vars or {}).get("inventory_hostname", self._play_context.remote_addr)
        try:  # the module's own spec: bad input fails now, in one line, not after the timeout
            args = checked_options(ARGUMENT_SPEC, self._task.args)
        except OptionsError as error:
            return {**result, "failed": True, "msg": refusal(host, "health_wait", error)}
        missing = incomplete(args["targets"])
        if missing:
            return {**result, "failed": True, "msg": f"{host}: health_wait targets {', '.join(missing)} lack a name, "
                                                     "unit or health_url (the plan's whole URL)"}
        numbers = {name: args[name] for name in ("timeout", "delay", "progress_interval", "journal_lines",
                                                 "stall_timeout")}
        outcome, elapsed = self._wait(args, host, numbers, task_vars)
        if outcome is None:
            outcome = self._after_timeout(args, host, numbers, task_vars, elapsed)
        return {**result, **outcome}

    def _wait(self, args: dict, host: str, numbers: dict, task_vars: dict) -> tuple[dict | None, float]:
        """Look until every target is healthy (the result), the host is gone or a look fails at the timeout (that
        look), or the timeout passes with targets still waiting (None); and the seconds it took."""
        timeout, delay, interval = numbers["timeout"], max(1, numbers["delay"]), numbers["progress_interval"]
        started, shown = time.monotonic(), 0.0
        progress = Progress(numbers["stall_timeout"])
        while True:
            seen = self._look(args, PROGRESS_JOURNAL_LINES, task_vars)
            elapsed = time.monotonic() - started
            if seen.get("unreachable"):  # the host is gone: Ansible takes it out of the play
                return seen, elapsed
            if seen.get("failed") or "targets" not in seen:  # one look that failed is retried, like a refusal
                if elapsed >= timeout:
                    return seen, elapsed
                if elapsed - shown >= interval:
                    display.display(f"{host}: the health look failed, retrying: {seen.get('msg', '')[:200]}")
                    shown = elapsed
                time.sleep(pause_before_next_look(elapsed, delay, timeout))
                continue
            waiting = [target for target in seen["targets"] if not target["healthy"]]
            if not waiting:
                return {"changed": False, "targets": seen["targets"], "waited": round(elapsed, 1)}, elapsed
            stalled = progress.stalled(waiting, elapsed)
            if stalled:
                msg = " ".join(stall_message(host, target, since, numbers["stall_timeout"]) for target, since in stalled)
                return {"failed": True, "msg": msg, "targets": seen["targets"], "waited": round(elapsed, 1)}, elapsed
            if elapsed >= timeout:
                return None, elapsed
            if elapsed - shown >= interval:
                for target in waiting:
                    display.display(health_wait_line(host, target["name"], elapsed, timeout,
                                                     f"{target['url']}: {target['problem']}", target["journal"]))
                shown = elapsed
            time.sleep(pause_before_next_look(elapsed, delay, timeout))

    def _after_timeout(self, args: dict, host: str, numbers: dict, task_vars: dict, elapsed: float) -> dict:
        """One last look, with the whole journal: what still fails, and its journal lines."""
        timeout = numbers["timeout"]
        final = self._look(args, numbers["journal_lines"], task_vars)
        if final.get("failed") or final.get("unreachable") or "targets" not in final:
            return final
        failing = [target for target in final.get("targets", []) if not target["healthy"]]
        if not failing:  # answered in the last moment
            return {"changed": False, "targets": final["targets"], "waited": round(elapsed, 1)}
        msg = " ".join(
            f"{host}/{target['name']} ({target['unit']}) did not answer {target['url']} with 200 within {timeout}s"
            f" ({target['problem']}). Last journal lines: {' | '.join(target['journal']) or 'none'}"
            for target in failing)
        return {"failed": True, "msg": msg, "targets": final["targets"], "waited": round(elapsed, 1)}
