"""The locks (data/locks/): one per venv any plan can hold, each covering its venv's pins with hashes."""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
from pathlib import Path

import pytest
from unitlib import one_host

from ansible_collections.vllm_omni.serve.plugins.plugin_utils import _locks
from ansible_collections.vllm_omni.serve.plugins.plugin_utils._planner import build_plan

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


@pytest.mark.parametrize("name", sorted(_locks.all_locks()))
def test_every_lock_pins_its_inputs_and_hashes_every_entry(name):
    path = _locks.LOCK_DIR / f"{name}.txt"
    assert path.is_file(), f"data/locks/{name}.txt missing: run `make lock`"
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
    on_disk = {path.stem for path in _locks.LOCK_DIR.glob("*.txt")}
    assert on_disk == set(_locks.all_locks()), "data/locks/ holds files no plan uses (or misses some): run `make lock`"


def test_the_lock_entry_names_the_file_and_its_hash():
    name = _locks.router_lock()
    entry = _locks.lock_entry(name)
    path = _locks.LOCK_DIR / entry["file"]
    assert entry == {"name": name, "file": f"{name}.txt", "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def test_every_venv_of_a_plan_has_its_lock():
    """Each venv the plan installs names the lock of exactly its pins; uv's lock and the target come along."""
    cases = (("pd", "engine", True), ("aggregated", "engine", False), ("pd", "simulator", False))
    for layout, backend, master in cases:
        plan = build_plan(one_host(vllm_omni_layout=layout, vllm_omni_engine_backend=backend,
                                   vllm_omni_mooncake_master_enabled=master))
        venvs = [plan["backend"], plan["router"]] + ([plan["mooncake_master"]] if master else [])
        assert plan["mooncake_master"]["enabled"] == master
        for venv in venvs:
            lock = venv["lock"]
            assert (_locks.LOCK_DIR / lock["file"]).is_file()
            packages = venv.get("packages") or [venv["package"]]
            assert sorted(packages) == sorted(_locks.all_locks()[lock["name"]]), (layout, backend, master, lock["name"])
        assert plan["installer"]["uv_lock"]["name"] == _locks.uv_lock()
        assert plan["installer"]["lock_target"]["python"] == _locks.TARGET["python"]


def test_parse_lock_reads_continuations_and_the_from_source_header():
    text = ("# inputs: a==1\n# from source: b==2\n"
            "a==1 \\\n    --hash=sha256:aa \\\n    --hash=sha256:ab\n"
            "b==2 \\\n    --hash=sha256:bb\n    # via a\n")
    entries, from_source = wheelhouse.parse_lock(text)
    assert entries == {"a==1": ["sha256:aa", "sha256:ab"], "b==2": ["sha256:bb"]}
    assert from_source == ["b==2"]
