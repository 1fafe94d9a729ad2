# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""Action for vllm_omni.serve.venv_build (documentation in plugins/modules): run the python_venv role's
build-venv.sh on the host in the background and print its step, bytes written, rate and time left; or only
start it (wait: false) and wait for it in a later task (job)."""

from __future__ import annotations

import json
import shlex

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.vllm_omni.serve.plugins.module_utils._action_options import (
    VENV_BUILD,
    OptionsError,
    checked_options,
    refusal,
)
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime._detached import (
    ProgressPrinter,
    finish_detached,
    start_detached,
)
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime._progress import venv_line

display = Display()
SCRIPT = "build-venv.sh"  # roles/python_venv/files


class ActionModule(ActionBase):
    TRANSFERS_FILES = True
    _supports_check_mode = False  # it builds; the role reports what check mode would install instead

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        host = (task_vars or {}).get("inventory_hostname", self._play_context.remote_addr)
        try:
            args = checked_options(VENV_BUILD, self._task.args)
        except OptionsError as error:  # bad input: one line, before anything reaches the host
            return {**result, "failed": True, "msg": refusal(host, "venv_build", error)}
        path, job = args["path"], args["job"]
        if job is None and not args["settings"]:
            return {**result, "failed": True,
                    "msg": refusal(host, "venv_build", OptionsError("settings is required to start a build (job: to "
                                                                    "wait for one a task started with wait: false)"))}
        if job is not None and not {"dir", "script", "group", "started"} <= set(job):
            return {**result, "failed": True,
                    "msg": refusal(host, "venv_build", OptionsError("job is not what a task with wait: false "
                                                                    "returned (register that task, pass its job)"))}
        timeout, printer = args["timeout"], ProgressPrinter(display, args["progress_interval"])
        settings = {str(key): value if isinstance(value, str) else json.dumps(value)
                    for key, value in (args["settings"] or {}).items()}
        # uv builds beside the old venv (PATH.new); pip in place.
        building = path if settings.get("PYTHON_VENV_INSTALLER") == "pip" else f"{path}.new"

        def show(notes: str, written: str, elapsed: float) -> None:
            printer(venv_line(host, path, notes, int(written) if written.isdigit() else None, elapsed), elapsed)

        try:
            if job is None:
                job = start_detached(self, SCRIPT, "/bin/bash", [], {**settings, "PYTHON_VENV_PATH": path})
                job["building"] = building
                if not args["wait"]:  # a later task waits for it (job): this host's fork is free at once
                    return {**result, "changed": True, "path": path, "job": job}
            written = f"du -sb {shlex.quote(job.get('building', building))} 2>/dev/null | cut -f1"
            code, _stdout, stderr = finish_detached(self, job, timeout, show, extra=written)
        except RuntimeError as error:
            return {**result, "failed": True, "msg": str(error)}
        if code is None:
            return {**result, "failed": True, "msg": f"{host}: building {path} stopped after {timeout} s"}
        if code != "0":
            said = stderr.strip().splitlines()[-5:]
            return {**result, "failed": True, "rc": int(code),
                    "msg": f"{host}: building {path} failed (exit {code}): " + (" | ".join(said) or "no output")}
        return {**result, "changed": True, "path": path}
