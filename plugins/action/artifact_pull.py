# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""Action for vllm_omni.serve.artifact_pull (documentation in plugins/modules): start artifact.py pull on
the host in the background, print its progress while it runs, return its result."""

from __future__ import annotations

import json
import shlex
import time

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.vllm_omni.serve.plugins.plugin_utils._progress import progress_line

display = Display()
SCRIPT = "artifact.py"  # roles/artifacts/files


class ActionModule(ActionBase):
    TRANSFERS_FILES = True
    _supports_check_mode = False  # it pulls; check mode skips it
    _VALID_ARGS = frozenset(("dest", "manifest", "sources", "full", "size", "timeout", "progress_interval"))

    def _shell(self, command: str) -> dict:
        return self._low_level_execute_command(command, sudoable=True)

    def _start(self, tmp: str, args: dict) -> str:
        """Copy the script, start it detached from this connection; its process group id."""
        script = f"{tmp}/{SCRIPT}"
        self._transfer_file(self._find_needle("files", SCRIPT), script)
        self._fixup_perms2([tmp, script])
        argv = ["/usr/bin/python3", script, "pull", str(args["dest"]), str(args["manifest"]),
                *[str(s) for s in args["sources"]], *(["--full"] if boolean(args.get("full", False)) else [])]
        inner = (f"PROGRESS_FILE={shlex.quote(tmp + '/progress')} {shlex.join(argv)} > {shlex.quote(tmp + '/out')} "
                 f"2> {shlex.quote(tmp + '/err')}; echo $? > {shlex.quote(tmp + '/rc')}")
        started = self._shell(f"cd / && setsid sh -c {shlex.quote(inner)} < /dev/null > /dev/null 2>&1 & echo $!")
        if started["rc"] != 0:
            raise RuntimeError(f"could not start {SCRIPT}: {started['stderr'].strip()[-300:]}")
        return started["stdout"].strip().splitlines()[-1]

    def _poll(self, tmp: str) -> tuple[str | None, str]:
        """(exit code once finished, the progress file's tail)."""
        seen = self._shell(f"cat {tmp}/rc 2>/dev/null; echo '#--#'; tail -c 2000 {tmp}/progress 2>/dev/null")
        code, _sep, progress = seen["stdout"].partition("#--#")
        return (code.strip() or None), progress

    def _wait(self, tmp: str, group: str, args: dict, artifact: str) -> str | None:
        host = self._task_vars.get("inventory_hostname", self._play_context.remote_addr)
        interval, timeout = int(args.get("progress_interval", 10)), int(args.get("timeout", 7200))
        started, last, shown = time.monotonic(), None, 0.0
        while True:
            code, progress = self._poll(tmp)
            if code is not None:
                return code
            elapsed = time.monotonic() - started
            if elapsed > timeout:
                self._shell(f"kill -- -{shlex.quote(group)} 2>/dev/null")
                return None
            line = progress_line(host, artifact, progress, args.get("size"), elapsed)
            if line and line != last and elapsed - shown >= interval:
                display.display(line)
                last, shown = line, elapsed
            # Short pulls end within a second or two: ask often at first, then every few seconds.
            time.sleep(min(0.5 + elapsed / 10, 5))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        self._task_vars = task_vars or {}
        args = self._task.args
        artifact = str(args["manifest"]).rsplit("/", 1)[-1].removesuffix(".json")
        remote_tmp = self._make_tmp_path()
        try:
            code = self._wait(remote_tmp, self._start(remote_tmp, args), args, artifact)
            out = self._shell(f"cat {remote_tmp}/out; echo '#--#'; tail -c 3000 {remote_tmp}/err")["stdout"]
        except RuntimeError as error:
            return {**result, "failed": True, "msg": str(error)}
        finally:
            self._remove_tmp_path(remote_tmp)
        stdout, _sep, stderr = out.partition("#--#")
        if code is None:
            return {**result, "failed": True, "msg": f"{artifact}: stopped after {args.get('timeout', 7200)} s"}
        if code != "0":
            said = [line for line in stderr.splitlines() if line.startswith("artifact: ")] or stderr.strip().splitlines()[-3:]
            return {**result, "failed": True, "rc": int(code), "msg": " ".join(said) or f"{SCRIPT} exited {code}"}
        answer = json.loads(stdout.strip().splitlines()[-1])
        return {**result, **answer, "changed": answer["bytes_received"] > 0 or bool(answer["repaired"])}
