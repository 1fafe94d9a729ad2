# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""Benchmark helper (not shipped): the slowest tasks of a playbook run, printed at the end.

    ANSIBLE_CALLBACK_PLUGINS=tests/callbacks ANSIBLE_CALLBACKS_ENABLED=task_timer ansible-playbook ...
"""

from __future__ import annotations

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
        for seconds, name in sorted(self._times, reverse=True)[:15]:
            self._display.display(f"  {seconds:6.2f} s  {name}")
