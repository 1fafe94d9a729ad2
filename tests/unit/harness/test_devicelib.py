"""The rehearsals' roots are removed whichever process made them (tests/unit/devicelib.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import devicelib


def test_the_roots_of_ended_processes_go_and_those_of_running_ones_stay(tmp_path, monkeypatch):
    monkeypatch.setattr(devicelib, "ROOTS_PARENT", str(tmp_path))
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                           check=True).stdout.strip()
    names = {"ended": f"vllm-omni-serve-contract-pd-{ended}", "self": f"vllm-omni-serve-rehearsal-{os.getpid()}",
             "running": f"vllm-omni-serve-rehearsal-{os.getppid()}", "other": "someone-elses-1"}
    for name in names.values():
        (tmp_path / name / "opt").mkdir(parents=True)
    devicelib.remove_roots_of_ended_processes()
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([names["running"], names["other"]])
