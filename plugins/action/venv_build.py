# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""Action for vllm_omni.serve.venv_build (documentation in plugins/modules): run the python_venv role's
build-venv.sh on the host in the background and print its step, bytes written, rate and time left."""

from __future__ import annotations

import json
import shlex

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.vllm_omni.serve.plugins.plugin_utils._detached import DetachedScript
from ansible_collections.vllm_omni.serve.plugins.plugin_utils._progress import venv_line

display = Display()
SCRIPT = "build-venv.sh"  # roles/python_venv/files


class ActionModule(ActionBase):
    TRANSFERS_FILES = True
    _supports_check_mode = False  # it builds; the role reports what check mode would install instead
    _VALID_ARGS = frozenset(("path", "settings", "timeout", "progress_interval"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        host = (task_vars or {}).get("inventory_hostname", self._play_context.remote_addr)
        path = str(args["path"])
        interval, timeout = int(args.get("progress_interval", 15)), int(args.get("timeout", 3600))
        settings = {str(key): value if isinstance(value, str) else json.dumps(value)
                    for key, value in dict(args.get("settings") or {}).items()}
        # uv builds beside the old venv (PATH.new); pip in place.
        building = path if settings.get("PYTHON_VENV_INSTALLER") == "pip" else f"{path}.new"
        shown = {"line": None, "at": 0.0}

        def show(notes: str, written: str, elapsed: float) -> None:
            line = venv_line(host, path, notes, int(written) if written.isdigit() else None, elapsed)
            if line and line != shown["line"] and elapsed - shown["at"] >= interval:
                display.display(line)
                shown.update(line=line, at=elapsed)

        remote_tmp = self._make_tmp_path()
        run = DetachedScript(self, remote_tmp, SCRIPT)
        try:
            run.start("/bin/bash", [], {**settings, "PYTHON_VENV_PATH": path})
            code = run.wait(timeout, show, extra=f"du -sb {shlex.quote(building)} 2>/dev/null | cut -f1")
            _stdout, stderr = run.output()
        except RuntimeError as error:
            return {**result, "failed": True, "msg": str(error)}
        finally:
            self._remove_tmp_path(remote_tmp)
        if code is None:
            return {**result, "failed": True, "msg": f"{host}: building {path} stopped after {timeout} s"}
        if code != "0":
            said = stderr.strip().splitlines()[-5:]
            return {**result, "failed": True, "rc": int(code),
                    "msg": f"{host}: building {path} failed (exit {code}): " + (" | ".join(said) or "no output")}
        return {**result, "changed": True, "path": path}
