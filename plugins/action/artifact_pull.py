# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""Action for vllm_omni.serve.artifact_pull (documentation in plugins/modules): start artifact.py pull on
the host in the background, print its progress while it runs, return its result."""

from __future__ import annotations

import json

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.vllm_omni.serve.plugins.module_utils._action_options import (
    ARTIFACT_PULL,
    OptionsError,
    checked_options,
    refusal,
)
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime._detached import ProgressPrinter, run_detached
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime._progress import progress_line

display = Display()
SCRIPT = "artifact.py"  # roles/artifacts/files


class ActionModule(ActionBase):
    TRANSFERS_FILES = True
    _supports_check_mode = False  # it pulls; check mode skips it

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        host = (task_vars or {}).get("inventory_hostname", self._play_context.remote_addr)
        try:
            args = checked_options(ARTIFACT_PULL, self._task.args)
        except OptionsError as error:  # bad input: one line, before anything reaches the host
            return {**result, "failed": True, "msg": refusal(host, "artifact_pull", error)}
        artifact = args["manifest"].rsplit("/", 1)[-1].removesuffix(".json")
        timeout, printer = args["timeout"], ProgressPrinter(display, args["progress_interval"])

        def show(progress: str, _extra: str, elapsed: float) -> None:
            printer(progress_line(host, artifact, progress, args["size"], elapsed), elapsed)

        try:
            code, stdout, stderr = run_detached(
                self, SCRIPT, "/usr/bin/python3",
                ["pull", args["dest"], args["manifest"], *args["sources"], *(["--full"] if args["full"] else [])],
                None, timeout, show)
        except RuntimeError as error:
            return {**result, "failed": True, "msg": str(error)}
        if code is None:
            return {**result, "failed": True, "msg": f"{artifact}: stopped after {timeout} s"}
        if code != "0":
            said = [line for line in stderr.splitlines() if line.startswith("artifact: ")] or stderr.strip().splitlines()[-3:]
            return {**result, "failed": True, "rc": int(code), "msg": " ".join(said) or f"{SCRIPT} exited {code}"}
        answer = json.loads(stdout.strip().splitlines()[-1])
        return {**result, **answer, "changed": answer["bytes_received"] > 0 or bool(answer["repaired"])}
