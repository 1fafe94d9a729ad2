"""The controller fills wheel sets for host platforms this lab has no machine of (download only, hashes checked).

The lab proves Debian 12 and 13 end to end. For Ubuntu 22.04, Ubuntu 24.04 and RHEL 9 the proof that a
deploy would get past its controller step is the controller step itself: roles/artifacts/files/wheelhouse.py
(what the artifacts role runs, with the platform's Python, ABI and manylinux tags from the plan) fills the
router's and the Mooncake master's wheel sets (each with uv's) from PyPI with --require-hashes, and every
wheel it leaves is one the platform can install. The engine's sets (about 4 GB each) are the same code
path with bigger files; docs/platforms.md records that they resolve.
"""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host import _locks, _platforms

REPO = Path(__file__).resolve().parents[2]
WHEELHOUSE = REPO / "roles" / "artifacts" / "files" / "wheelhouse.py"
_SPEC = importlib.util.spec_from_file_location("wheelhouse_for_platforms", WHEELHOUSE)
wheelhouse = importlib.util.module_from_spec(_SPEC)  # the script under test, loaded from the role's files
_SPEC.loader.exec_module(wheelhouse)


def _fits(wheel: str, target: dict) -> bool:
    """The wheel's tags name the target's Python (or any), ABI (or none/abi3) and one of its platforms."""
    python, abi, platform = wheel[:-len(".whl")].split("-")[-3:]
    pythons_ok = any(tag in ("py3", "py2.py3", f"cp{target['python'].replace('.', '')}") or
                     (tag.startswith(("py3", "cp3")) and abi in ("none", "abi3")) for tag in python.split("."))
    return pythons_ok and abi in ("none", "abi3", target["abi"]) and (
        platform == "any" or any(tag in target["pip_platforms"] for tag in platform.split(".")))


@pytest.mark.parametrize("platform", ["ubuntu2204", "ubuntu2404", "rhel9"])
@pytest.mark.parametrize("lock", [_locks.router_lock(), _locks.master_lock()])
def test_the_controller_fills_the_wheel_set_of_a_platform_it_is_not(platform, lock, tmp_path):
    target = _platforms.target(platform)
    out = tmp_path / "set"
    result = subprocess.run(
        [sys.executable, str(WHEELHOUSE), str(out), target["python"], target["machine"], target["abi"],
         ",".join(target["pip_platforms"]), str(_locks.lock_path(lock, platform)),
         str(_locks.lock_path(_locks.uv_lock(), platform))], capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert (out / ".complete").is_file()
    wheels = sorted(path.name for path in out.glob("*.whl"))
    entries = {}
    for name in (lock, _locks.uv_lock()):
        locked, _from_source = wheelhouse.parse_lock(_locks.lock_path(name, platform).read_text())
        entries.update(locked)
    # One wheel per pin, each fit for the platform, each one of the hashes the lock names.
    assert len(wheels) == len(entries), (len(wheels), len(entries))
    allowed = {h.removeprefix("sha256:") for hashes in entries.values() for h in hashes}
    for wheel in wheels:
        assert _fits(wheel, target), f"{wheel} does not install on {platform}"
        assert hashlib.sha256((out / wheel).read_bytes()).hexdigest() in allowed, f"{wheel}: not a locked file"
    # What the hosts install with: the lock's own pins and hashes.
    assert (out / f"{lock}.host.txt").read_text().count("==") == len(
        wheelhouse.parse_lock(_locks.lock_path(lock, platform).read_text())[0])
