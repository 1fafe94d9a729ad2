"""The locks (data/locks/): one per venv any plan can hold, each covering its venv's pins with hashes."""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
from pathlib import Path

import pytest
from unitlib import one_host

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host import _locks, _platforms
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan

ROOT = Path(__file__).resolve().parents[4]
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==(\S+)")


def _load_script(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


wheelhouse = _load_script("wheelhouse_under_test", ROOT / "roles/artifacts/files/wheelhouse.py")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(path: Path) -> dict[str, str]:
    entries, _unused = wheelhouse.parse_lock(path.read_text())
    return {_normal(PIN.match(pin).group(1)): PIN.match(pin).group(2) for pin in entries}


@pytest.mark.parametrize(("platform", "name"), _locks.every_platform_lock())
def test_every_lock_pins_its_inputs_and_hashes_every_entry(platform, name):
    if name in _locks.unavailable(platform):
        pytest.skip(f"{platform}: {_locks.unavailable(platform)[name]}")
    path = _locks.lock_path(name, platform)
    assert path.is_file(), f"data/locks/{platform}/{name}.txt missing: run `make lock`"
    assert f"CPython {_platforms.target(platform)['python']} " in path.read_text().splitlines()[1]
    entries, from_source = wheelhouse.parse_lock(path.read_text())
    assert entries, f"{name}: no pins"
    unhashed = [pin for pin, hashes in entries.items() if not hashes]
    assert not unhashed, f"{name}: pins without a hash: {unhashed}"
    assert all(h.startswith("sha256:") for hashes in entries.values() for h in hashes)
    pins = _pins(path)
    for wanted in _locks.all_locks()[name]:
        package, _sep, version = wanted.partition("==")
        assert pins.get(_normal(package)) == version, f"{name}: {wanted} not pinned as such"
    assert set(from_source) <= set(entries), f"{name}: a from-source pin is not in the lock"


def test_no_lock_file_is_left_over():
    assert {path.name for path in _locks.LOCK_DIR.iterdir()} == set(_platforms.platform_ids()), \
        "data/locks/ holds something that is no platform's folder: run `make lock`"
    for platform in _platforms.platform_ids():
        on_disk = {path.stem for path in (_locks.LOCK_DIR / platform).glob("*.txt")}
        expected = set(_locks.all_locks()) - set(_locks.unavailable(platform))
        assert on_disk == expected, f"data/locks/{platform}/ holds files no plan uses (or misses some): run `make lock`"


def test_the_lock_entry_names_the_file_its_platform_and_its_hash():
    name = _locks.router_lock()
    entry = _locks.lock_entry(name, "ubuntu2404")
    path = _locks.LOCK_DIR / entry["file"]
    assert entry == {"name": name, "platform": "ubuntu2404", "file": f"ubuntu2404/{name}.txt",
                     "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def test_every_venv_of_a_plan_has_its_lock():
    """Each venv the plan installs names the lock of exactly its pins; uv's lock and the target come along."""
    cases = (("pd", "engine", True), ("aggregated", "engine", False), ("pd", "simulator", False))
    for layout, backend, master in cases:
        plan = build_plan(one_host(vllm_omni_layout=layout, vllm_omni_engine_backend=backend,
                                   vllm_omni_mooncake_master_enabled=master))
        venvs = [plan["backend"], plan["router"]] + ([plan["mooncake_master"]] if master else [])
        assert plan["mooncake_master"]["enabled"] == master
        assert plan["host_platforms"] == {"gpu-a": "debian12"}
        assert plan["host_platform_sources"] == {"gpu-a": "assumed until discovery"}
        locks = plan["locks"]["debian12"]
        for venv in venvs:
            lock = locks[venv["lock"]]
            assert (_locks.LOCK_DIR / lock["file"]).is_file() and lock["file"].startswith("debian12/")
            packages = venv.get("packages") or [venv["package"]]
            assert sorted(packages) == sorted(_locks.all_locks()[lock["name"]]), (layout, backend, master, lock["name"])
        assert plan["installer"]["uv_lock"] == _locks.uv_lock() and _locks.uv_lock() in locks
        assert plan["platforms"]["debian12"]["python"] == "3.11"
        assert plan["platforms"]["debian12"]["interpreter"] == "/usr/bin/python3"


def test_parse_lock_reads_continuations_and_the_from_source_header():
    text = ("# inputs: a==1\n# from source: b==2\n"
            "a==1 \\\n    --hash=sha256:aa \\\n    --hash=sha256:ab\n"
            "b==2 \\\n    --hash=sha256:bb\n    # via a\n")
    entries, from_source = wheelhouse.parse_lock(text)
    assert entries == {"a==1": ["sha256:aa", "sha256:ab"], "b==2": ["sha256:bb"]}
    assert from_source == ["b==2"]
