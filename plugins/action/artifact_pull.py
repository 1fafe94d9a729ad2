# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""Action for vllm_omni.serve.artifact_pull (documentation in plugins/modules): start artifact.py pull on
the host in the background, print its progress while it runs, return its result."""

from __future__ import annotations

import json

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.vllm_omni.serve.plugins.plugin_utils._detached import DetachedScript
from ansible_collections.vllm_omni.serve.plugins.plugin_utils._progress import progress_line

display = Display()
SCRIPT = "artifact.py"  # roles/artifacts/files


class ActionModule(ActionBase):
    TRANSFERS_FILES = True
    _supports_check_mode = False  # it pulls; check mode skips it
    _VALID_ARGS = frozenset(("dest", "manifest", "sources", "full", "size", "timeout", "progress_interval"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        host = (task_vars or {}).get("inventory_hostname", self._play_context.remote_addr)
        artifact = str(args["manifest"]).rsplit("/", 1)[-1].removesuffix(".json")
        interval, timeout = int(args.get("progress_interval", 10)), int(args.get("timeout", 7200))
        shown = {"line": None, "at": 0.0}

        def show(progress: str, _extra: str, elapsed: float) -> None:
            line = progress_line(host, artifact, progress, args.get("size"), elapsed)
            if line and line != shown["line"] and elapsed - shown["at"] >= interval:
                display.display(line)
                shown.update(line=line, at=elapsed)

        remote_tmp = self._make_tmp_path()
        run = DetachedScript(self, remote_tmp, SCRIPT)
        try:
            run.start("/usr/bin/python3", ["pull", str(args["dest"]), str(args["manifest"]),
                                           *[str(s) for s in args["sources"]],
                                           *(["--full"] if boolean(args.get("full", False)) else [])])
            code = run.wait(timeout, show)
            stdout, stderr = run.output()
        except RuntimeError as error:
            return {**result, "failed": True, "msg": str(error)}
        finally:
            self._remove_tmp_path(remote_tmp)
        if code is None:
            return {**result, "failed": True, "msg": f"{artifact}: stopped after {timeout} s"}
        if code != "0":
            said = [line for line in stderr.splitlines() if line.startswith("artifact: ")] or stderr.strip().splitlines()[-3:]
            return {**result, "failed": True, "rc": int(code), "msg": " ".join(said) or f"{SCRIPT} exited {code}"}
        answer = json.loads(stdout.strip().splitlines()[-1])
        return {**result, **answer, "changed": answer["bytes_received"] > 0 or bool(answer["repaired"])}
