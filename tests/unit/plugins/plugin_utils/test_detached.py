"""What the long-running actions share (plugin_utils/runtime/_detached.py): a script run detached on the host
(here the host is this machine, through a stand-in for the action's connection), and a progress printer that
does not repeat itself."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time

import pytest

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime._detached import (
    ProgressPrinter,
    finish_detached,
    run_detached,
    start_detached,
)


class Shell:
    tmpdir = None  # the task's temp directory, which Ansible removes when the task ends (ActionBase.cleanup)


class Connection:
    def __init__(self):
        self._shell = Shell()


class LocalAction:
    """The ActionBase methods DetachedScript uses, run on this machine instead of over a connection."""

    def __init__(self, scripts: str):
        self.scripts, self.tmps = scripts, []
        self._connection = Connection()

    def _make_tmp_path(self):
        self.tmps.append(tempfile.mkdtemp(prefix="detached-"))
        self._connection._shell.tmpdir = self.tmps[-1]
        return self.tmps[-1]

    def _remove_tmp_path(self, path):
        shutil.rmtree(path)
        if self._connection._shell.tmpdir == path:
            self._connection._shell.tmpdir = None

    def _find_needle(self, kind, name):
        assert kind == "files"
        return os.path.join(self.scripts, name)

    def _transfer_file(self, local, remote):
        shutil.copy(local, remote)

    def _fixup_perms2(self, paths):
        pass

    def _low_level_execute_command(self, command, sudoable=True):
        done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=False)
        return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


@pytest.fixture
def action(tmp_path):
    (tmp_path / "steps.sh").write_text(
        'echo "step one" >> "$PROGRESS_FILE"; sleep 1.2; echo "step two ${GREETING}" >> "$PROGRESS_FILE"\n'
        'echo result; echo "a warning" >&2; exit "${EXIT_CODE:-0}"\n')
    (tmp_path / "forever.sh").write_text("echo started >> \"$PROGRESS_FILE\"; sleep 60\n")
    return LocalAction(str(tmp_path))


def test_a_script_runs_to_its_end_with_its_environment_and_progress(action):
    seen = []
    code, stdout, stderr = run_detached(action, "steps.sh", "/bin/sh", [], {"GREETING": "hello there"}, 30,
                                        lambda progress, extra, elapsed: seen.append((progress.strip(), extra)),
                                        extra="echo extra-output")
    assert (code, stdout.strip(), stderr.strip()) == ("0", "result", "a warning")
    assert ("step one", "extra-output") in seen
    assert not os.path.exists(action.tmps[0])  # its temp directory is gone


def test_the_exit_code_comes_back(action):
    code, _stdout, _stderr = run_detached(action, "steps.sh", "/bin/sh", [], {"EXIT_CODE": "7"}, 30, lambda *a: None)
    assert code == "7"


def test_a_script_past_its_timeout_is_killed_and_gives_none(action):
    code, _stdout, _stderr = run_detached(action, "forever.sh", "/bin/sh", [], None, 1, lambda *a: None)
    assert code is None and not os.path.exists(action.tmps[0])
    for _attempt in range(50):  # its process group was sent SIGTERM: gone within moments
        leftover = subprocess.run(["pgrep", "-f", action.tmps[0]], capture_output=True, text=True, check=False)
        if not leftover.stdout.strip():
            break
        time.sleep(0.1)
    assert leftover.stdout.strip() == ""


def test_a_script_that_cannot_start_raises_and_leaves_nothing(action, monkeypatch):
    monkeypatch.setattr(action, "_low_level_execute_command",
                        lambda command, sudoable=True: {"rc": 1, "stdout": "", "stderr": "sh: setsid: not found"})
    with pytest.raises(RuntimeError, match=r"could not start steps\.sh: sh: setsid: not found"):
        run_detached(action, "steps.sh", "/bin/sh", [], None, 5, lambda *a: None)
    assert not os.path.exists(action.tmps[0])


def test_a_script_started_in_one_task_is_waited_for_in_another(action):
    job = start_detached(action, "steps.sh", "/bin/sh", [], {"GREETING": "later"})
    # The task's end no longer removes the directory the script runs in: Ansible's cleanup sees none.
    assert action._connection._shell.tmpdir is None and os.path.isdir(job["dir"])
    later = LocalAction(action.scripts)  # the next task: another action, the same host
    own = later._make_tmp_path()  # what Ansible makes for an action that transfers files, before its run()
    seen = []
    code, stdout, _stderr = finish_detached(later, job, 30, lambda progress, extra, elapsed: seen.append(progress))
    assert (code, stdout.strip()) == ("0", "result")
    assert any("step one" in progress for progress in seen)  # its progress, read by the waiting task
    assert not os.path.exists(job["dir"])  # the waiting task removed it
    assert later._connection._shell.tmpdir == own  # and still knows its own, which its end-of-task cleanup removes
    later._remove_tmp_path(own)  # that cleanup, which Ansible runs after the task


def test_a_start_uses_the_task_temp_directory_it_already_has(action):
    existing = action._make_tmp_path()
    job = start_detached(action, "steps.sh", "/bin/sh", [], None)
    assert job["dir"] == existing and action.tmps == [existing]  # no second directory left behind
    assert finish_detached(action, job, 30, lambda *a: None)[0] == "0"


def test_a_wait_counts_its_timeout_from_the_start(action):
    job = start_detached(action, "forever.sh", "/bin/sh", [], None)
    job["started"] -= 120  # started two minutes ago, by the clock the job carries
    began = time.monotonic()
    code, _stdout, _stderr = finish_detached(action, job, 60, lambda *a: None)
    assert code is None and time.monotonic() - began < 5  # past its 60 s already: stopped at the first look
    assert not os.path.exists(job["dir"])


def test_a_start_that_fails_leaves_nothing(action, monkeypatch):
    monkeypatch.setattr(action, "_low_level_execute_command",
                        lambda command, sudoable=True: {"rc": 1, "stdout": "", "stderr": "no shell"})
    with pytest.raises(RuntimeError, match=r"could not start steps\.sh: no shell"):
        start_detached(action, "steps.sh", "/bin/sh", [], None)
    assert not os.path.exists(action.tmps[0])


def test_the_printer_prints_a_new_line_once_per_interval():
    printed = []

    class Display:
        def display(self, line):
            printed.append(line)

    printer = ProgressPrinter(Display(), 10)
    # Nothing before the first interval; then a changed line at most every 10 s; never the same line twice.
    for elapsed, line in ((0, None), (1, "a"), (5, "b"), (11, "a"), (12, "c"), (22, "c"), (23, "d"), (33, "d"),
                          (50, "d")):
        printer(line, elapsed)
    assert printed == ["a", "c", "d"]
