# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""A long script on a host, run detached from the connection so the action can print its progress
(artifact_pull, venv_build): copy it into the task's remote temp directory, start it in its own
process group with its output, progress file and exit code beside it, poll, stop it on timeout.
Starting and waiting can be two tasks (venv_build's wait: false, then job): each host's build then
starts in the first task's batches of forks and runs while the others start, instead of holding a fork
for its whole length.
Also what those actions and health_wait share: their whole-number options (an action's options do
not go through a module's argument spec) and a progress printer that does not repeat itself."""

from __future__ import annotations

import shlex
import time


class DetachedScript:
    """One run of ``script`` (a role's files/ entry) on the host of ``action`` (an ActionBase)."""

    def __init__(self, action, tmp: str, script: str):
        self.action, self.tmp, self.script = action, tmp, script
        self.group: str | None = None

    def shell(self, command: str) -> dict:
        return self.action._low_level_execute_command(command, sudoable=True)

    def start(self, interpreter: str, args: list[str], environment: dict[str, str] | None = None) -> None:
        remote = f"{self.tmp}/{self.script}"
        self.action._transfer_file(self.action._find_needle("files", self.script), remote)
        self.action._fixup_perms2([self.tmp, remote])
        env = {**(environment or {}), "PROGRESS_FILE": f"{self.tmp}/progress"}
        assignments = " ".join(f"{key}={shlex.quote(str(value))}" for key, value in env.items())
        quoted = shlex.quote
        inner = (f"{assignments} {shlex.join([interpreter, remote, *args])} > {quoted(self.tmp + '/out')} "
                 f"2> {quoted(self.tmp + '/err')}; echo $? > {quoted(self.tmp + '/rc')}")
        started = self.shell(f"cd / && setsid sh -c {quoted(inner)} < /dev/null > /dev/null 2>&1 & echo $!")
        if started["rc"] != 0:
            raise RuntimeError(f"could not start {self.script}: {started['stderr'].strip()[-300:]}")
        self.group = started["stdout"].strip().splitlines()[-1]

    def poll(self, extra: str = "") -> tuple[str | None, str, str]:
        """(exit code once finished, the progress file's tail, the output of ``extra``, a shell command)."""
        seen = self.shell(f"cat {self.tmp}/rc 2>/dev/null; echo '#--#'; tail -c 2000 {self.tmp}/progress 2>/dev/null;"
                          f" echo '#--#'; {extra or 'true'}")
        code, _sep, rest = seen["stdout"].partition("#--#")
        progress, _sep, extra_out = rest.partition("#--#")
        return (code.strip() or None), progress, extra_out.strip()

    def wait(self, timeout: int, on_progress, extra: str = "", elapsed_before: float = 0.0) -> str | None:
        """Poll until the script ends (its exit code) or ``timeout`` seconds pass (None; the script is
        killed), ``elapsed_before`` of them already spent (it was started by an earlier task).
        ``on_progress(progress_text, extra_output, elapsed)`` is called after each poll."""
        started = time.monotonic() - elapsed_before
        while True:
            code, progress, extra_out = self.poll(extra)
            if code is not None:
                return code
            elapsed = time.monotonic() - started
            if elapsed > timeout:
                self.shell(f"kill -- -{shlex.quote(self.group or '0')} 2>/dev/null")
                return None
            on_progress(progress, extra_out, elapsed)
            # Short runs end within a second or two: ask often at first, then every few seconds.
            time.sleep(min(0.5 + elapsed / 10, 5))

    def output(self) -> tuple[str, str]:
        """(stdout, the last 3000 bytes of stderr)."""
        out = self.shell(f"cat {self.tmp}/out; echo '#--#'; tail -c 3000 {self.tmp}/err")["stdout"]
        stdout, _sep, stderr = out.partition("#--#")
        return stdout, stderr


def run_detached(action, script: str, interpreter: str, args: list[str], environment: dict[str, str] | None,
                 timeout: int, on_progress, extra: str = "") -> tuple[str | None, str, str]:
    """Run ``script`` to its end in a temp directory made for it and removed after: (exit code, or None
    when ``timeout`` ran out and it was killed; stdout; the end of stderr). RuntimeError when it cannot
    start."""
    return finish_detached(action, start_detached(action, script, interpreter, args, environment), timeout,
                           on_progress, extra=extra)


def start_detached(action, script: str, interpreter: str, args: list[str],
                   environment: dict[str, str] | None) -> dict:
    """Start ``script`` and return at once: the job that finish_detached, in this task or a later one, waits for.

    Its directory is the task's temp directory (made here if the action has none yet). It outlives the task:
    the action's end-of-task cleanup no longer knows it, and finish_detached removes it. RuntimeError, and
    nothing left on the host, when the script cannot start."""
    remote_tmp = action._connection._shell.tmpdir or action._make_tmp_path()
    run = DetachedScript(action, remote_tmp, script)
    try:
        run.start(interpreter, args, environment)
    except RuntimeError:
        action._remove_tmp_path(remote_tmp)
        raise
    action._connection._shell.tmpdir = None
    return {"dir": remote_tmp, "script": script, "group": run.group, "started": time.time()}


def finish_detached(action, job: dict, timeout: int, on_progress, extra: str = "") -> tuple[str | None, str, str]:
    """Wait for the ``job`` start_detached returned, ``timeout`` seconds counted from its start: (exit code, or
    None when the time ran out and it was killed; stdout; the end of stderr). Its directory is removed."""
    run = DetachedScript(action, job["dir"], job["script"])
    run.group = job["group"]
    try:
        code = run.wait(timeout, on_progress, extra=extra, elapsed_before=max(0.0, time.time() - job["started"]))
        stdout, stderr = run.output()
    finally:
        # A later task has a temp directory of its own (Ansible makes one for an action that transfers files), which
        # its end-of-task cleanup removes, provided removing the job's does not make the action forget it.
        own = action._connection._shell.tmpdir
        action._remove_tmp_path(job["dir"])
        action._connection._shell.tmpdir = own if own != job["dir"] else None
    return code, stdout, stderr


class ProgressPrinter:
    """Prints a progress line when it differs from the last one printed and ``interval`` seconds have
    passed since then; None (nothing to say yet) prints nothing."""

    def __init__(self, display, interval: float):
        self.display, self.interval = display, interval
        self.line: str | None = None
        self.at = 0.0

    def __call__(self, line: str | None, elapsed: float) -> None:
        if line and line != self.line and elapsed - self.at >= self.interval:
            self.display.display(line)
            self.line, self.at = line, elapsed
