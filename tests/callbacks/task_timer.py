# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""Benchmark helper (not shipped): the slowest tasks of a playbook run, printed at the end.

    ANSIBLE_CALLBACK_PLUGINS=tests/callbacks ANSIBLE_CALLBACKS_ENABLED=task_timer ansible-playbook ...

With TASK_TIMER_FILE=PATH every task's time (slowest first, with the play's and the run's totals) is also
appended to PATH: a run whose output a test captures can still be profiled.
"""

from __future__ import annotations

import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: task_timer
type: aggregate
short_description: Print the slowest tasks (benchmarks only)
description: Wall time per task (all hosts together), the slowest 15 at the end.
requirements: [enable in configuration]
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "task_timer"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._times: list[tuple[float, str]] = []
        self._current = None
        self._start = time.monotonic()

    def _close(self):
        if self._current:
            name, started = self._current
            self._times.append((time.monotonic() - started, name))
            self._current = None

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._close()
        self._current = (task.get_name(), time.monotonic())

    v2_playbook_on_handler_task_start = v2_playbook_on_task_start

    def v2_playbook_on_stats(self, stats):
        self._close()
        total = time.monotonic() - self._start
        self._display.display(f"task_timer: {total:.1f} s in all; slowest tasks:")
        ranked = sorted(self._times, reverse=True)
        for seconds, name in ranked[:15]:
            self._display.display(f"  {seconds:6.2f} s  {name}")
        if os.environ.get("TASK_TIMER_FILE"):
            with open(os.environ["TASK_TIMER_FILE"], "a", encoding="utf-8") as kept:
                kept.write(f"== {total:.1f} s in all, {len(ranked)} tasks\n")
                kept.writelines(f"{seconds:8.2f} {name}\n" for seconds, name in ranked)
