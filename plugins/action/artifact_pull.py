# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""Action for vllm_omni.serve.artifact_pull (documentation in plugins/modules): start artifact.py pull on
the host in the background, print its progress while it runs, return its result."""

from __future__ import annotations

import json

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime._detached import (
    ProgressPrinter,
    run_detached,
    whole_numbers,
)
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime._progress import progress_line

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
        try:
            numbers = whole_numbers(args, {"progress_interval": 10, "timeout": 7200})
        except ValueError as error:  # bad input: one line, not a traceback
            return {**result, "failed": True, "msg": f"{host}: artifact_pull {error}"}
        timeout, printer = numbers["timeout"], ProgressPrinter(display, numbers["progress_interval"])

        def show(progress: str, _extra: str, elapsed: float) -> None:
            printer(progress_line(host, artifact, progress, args.get("size"), elapsed), elapsed)

        try:
            code, stdout, stderr = run_detached(
                self, SCRIPT, "/usr/bin/python3",
                ["pull", str(args["dest"]), str(args["manifest"]), *[str(s) for s in args["sources"]],
                 *(["--full"] if boolean(args.get("full", False)) else [])],
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
