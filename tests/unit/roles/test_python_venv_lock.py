"""The host side of a locked install (roles/python_venv/files/build-venv.sh), run here with uv.

The role hands the script the lock (every pin with its sha256) and the wheel set copied from the
controller. A wheel whose bytes are not the locked ones must be refused before anything is
installed, and the venv that was serving must stay as it was.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from unitlib import REPO

SCRIPT = REPO / "roles/python_venv/files/build-venv.sh"
NAME, VERSION = "lock_probe", "1.0"


def make_wheel(directory: Path, body: str) -> Path:
    """A minimal pure-Python wheel, valid enough for uv (METADATA, WHEEL, RECORD)."""
    files = {
        f"{NAME}/__init__.py": body,
        f"{NAME}-{VERSION}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n",
        f"{NAME}-{VERSION}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{NAME}-{VERSION}.dist-info/RECORD,,")
    files[f"{NAME}-{VERSION}.dist-info/RECORD"] = "\n".join(record) + "\n"
    wheel = directory / f"{NAME}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def build(venv: Path, wheels: Path, lock: Path, marker: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["/bin/bash", str(SCRIPT)], env=build_env(venv, wheels, lock, marker), capture_output=True,
                          text=True, check=False)


def build_env(venv: Path, wheels: Path, lock: Path, marker: dict) -> dict[str, str]:
    uv = shutil.which("uv")
    assert uv, "uv is not on PATH: run the unit tests through make (the tool venv has uv)"
    return {**os.environ, "PYTHON_VENV_PATH": str(venv), "PYTHON_VENV_PYTHON": sys.executable,
            "PYTHON_VENV_INSTALLER": "uv", "PYTHON_VENV_UV": uv, "PYTHON_VENV_FIND_LINKS": str(wheels),
            "PYTHON_VENV_LOCK": str(lock), "PYTHON_VENV_PACKAGES": f"{NAME}=={VERSION}",
            "PYTHON_VENV_MARKER": json.dumps(marker), "UV_OFFLINE": "1"}


@pytest.fixture
def locked_wheel(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = make_wheel(wheels, "ANSWER = 'locked'\n")
    lock = tmp_path / "lock.txt"
    lock.write_text(f"{NAME}=={VERSION} \\\n    --hash=sha256:{hashlib.sha256(wheel.read_bytes()).hexdigest()}\n")
    return wheels, wheel, lock


def test_the_locked_wheel_installs_and_the_venv_records_its_lock(tmp_path, locked_wheel):
    wheels, _wheel, lock = locked_wheel
    venv = tmp_path / "venv"
    done = build(venv, wheels, lock, {"lock": "first"})
    assert done.returncode == 0, done.stdout + done.stderr
    answer = subprocess.run([str(venv / "bin/python"), "-c", f"import {NAME}; print({NAME}.ANSWER)"],
                            capture_output=True, text=True, check=True)
    assert answer.stdout.strip() == "locked"
    assert json.loads((venv / ".vllm-omni-serve.json").read_text()) == {"lock": "first"}


def test_a_tampered_wheel_is_refused_and_the_serving_venv_is_untouched(tmp_path, locked_wheel):
    wheels, wheel, lock = locked_wheel
    venv = tmp_path / "venv"
    assert build(venv, wheels, lock, {"lock": "first"}).returncode == 0
    before = sorted(str(p.relative_to(venv)) for p in venv.rglob("*"))
    # Same name, same version, other bytes: what a compromised mirror or a swapped file would give.
    wheel.unlink()
    make_wheel(wheels, "ANSWER = 'tampered'\n")
    done = build(venv, wheels, lock, {"lock": "second"})
    assert done.returncode != 0
    assert "hash mismatch" in (done.stdout + done.stderr).lower(), done.stdout + done.stderr
    assert json.loads((venv / ".vllm-omni-serve.json").read_text()) == {"lock": "first"}
    assert sorted(str(p.relative_to(venv)) for p in venv.rglob("*")) == before
    assert not (tmp_path / "venv.new").exists() and not (tmp_path / "venv.tmp").exists()
    answer = subprocess.run([str(venv / "bin/python"), "-c", f"import {NAME}; print({NAME}.ANSWER)"],
                            capture_output=True, text=True, check=True)
    assert answer.stdout.strip() == "locked"


def test_a_build_waits_for_one_still_running_in_the_same_directory(tmp_path, locked_wheel):
    """The action starts a build in one task and waits in the next; a deploy interrupted between them leaves the
    build running, and the next deploy's build must not start over beneath it (each removes the other's venv.new)."""
    wheels, _wheel, lock = locked_wheel
    venvs = tmp_path / "venvs"
    venvs.mkdir()
    progress = tmp_path / "progress"
    earlier = os.open(venvs, os.O_RDONLY)  # what the running build holds: the venvs' directory, locked
    fcntl.flock(earlier, fcntl.LOCK_EX)
    try:
        later = subprocess.Popen(["/bin/bash", str(SCRIPT)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 env={**build_env(venvs / "engine", wheels, lock, {"lock": "later"}),
                                      "PROGRESS_FILE": str(progress)})
        for _attempt in range(100):
            if progress.is_file() and "waiting for an earlier build" in progress.read_text():
                break
            time.sleep(0.05)
        assert "waiting for an earlier build in " + str(venvs) in progress.read_text()
        time.sleep(0.5)
        assert later.poll() is None and not (venvs / "engine.new").exists()  # it waits and touches nothing
    finally:
        fcntl.flock(earlier, fcntl.LOCK_UN)
        os.close(earlier)
    output, _unused = later.communicate(timeout=120)
    assert later.returncode == 0, output
    assert json.loads((venvs / "engine" / ".vllm-omni-serve.json").read_text()) == {"lock": "later"}
