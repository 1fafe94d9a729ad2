# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Locked, hashed host dependencies: one lock file per venv the collection installs and host platform.

Every venv (an engine version's, the simulator's, the router's, the Mooncake master's, and uv's own
tools venv) has a lock per host platform (``data/locks/<platform>/<venv>.txt``, platforms in
``data/platforms.yml``): every package it holds, pinned, with the sha256 of each file PyPI offers for
it, made for that platform's Python, glibc and machine with ``uv pip compile --generate-hashes`` by
``make lock`` (``scripts/lock.py``). The controller downloads exactly those wheels for that platform
(whatever its own Python and OS), and the hosts install them with hash checking: a wheel that is not
the one locked is refused. A venv that cannot be locked for a platform (no wheel of some pin for it)
is listed in ``data/locks/<platform>/unavailable.yml`` with the resolver's reason, and the planner
refuses a host of that platform that would need it.
"""

from __future__ import annotations

import functools
import hashlib

from . import _engine_data, _platforms

LOCK_DIR = _engine_data.DATA_DIR / "locks"
UNAVAILABLE = "unavailable.yml"
# A lock's header lines (scripts/lock.py writes them).
INPUTS = "# inputs: "
FROM_SOURCE = "# from source: "  # pins PyPI has no wheel for on the target: built on the controller (pure Python only)


def engine_packages(engine: _engine_data.EngineVersion, transport: str | None) -> list[str]:
    """The engine venv's top-level pins: vLLM and vLLM-Omni together, and for PD (``transport``: the
    KV connector, mooncake or nixl) its transfer library for the wheels' CUDA major."""
    packages = [f"vllm=={engine.vllm}", f"vllm-omni=={engine.version}"]
    cuda = f"cuda{engine.wheel_cuda_major}"
    if transport == "mooncake":
        variant = _engine_data.companions()["mooncake"][cuda]
        packages.append(f"{variant['package']}=={variant['version']}")
    elif transport == "nixl":
        for part in ("meta", cuda):
            variant = _engine_data.companions()["nixl"][part]
            packages.append(f"{variant['package']}=={variant['version']}")
    return packages


def excluded_packages(packages: list[str]) -> list[str]:
    """Packages a lock leaves out although a pin requires them: NIXL's import shim (``nixl``) requires every
    CUDA backend, and a venv needs only the one its pins name (the shim loads that one)."""
    pinned = {pin.split("==")[0] for pin in packages}
    backends = {variant["package"] for part, variant in _engine_data.companions()["nixl"].items() if part != "meta"}
    return sorted(backends - pinned) if pinned & backends else []


def constraining_lock(name: str) -> str | None:
    """The lock whose pins constrain ``name``'s when it is made: an engine's PD and aggregated venvs differ
    only by their transfer library, so each takes the aggregated venv's versions of everything else."""
    for version in _engine_data.supported_versions():
        engine = _engine_data.support_table()[version]
        base = engine_lock(engine, None)
        if name != base and name.startswith(base + "-"):
            return base
    return None


def engine_lock(engine: _engine_data.EngineVersion, transport: str | None) -> str:
    """The engine venv's lock: ``-pd`` with Mooncake (the first PD connector), ``-pd-nixl`` with NIXL."""
    suffix = {None: "", "mooncake": "-pd", "nixl": "-pd-nixl"}[transport]
    return f"vllm-omni-{engine.version}{suffix}"


def simulator_packages() -> list[str]:
    """xpyd-sim, and vllm-router, which stands in for a distributed pipeline's head."""
    companions = _engine_data.companions()
    return [f"xpyd-sim=={companions['xpyd_sim']}", f"vllm-router=={companions['vllm_router']}"]


def simulator_lock() -> str:
    return f"xpyd-sim-{_engine_data.companions()['xpyd_sim']}"


def router_packages() -> list[str]:
    return [f"vllm-router=={_engine_data.companions()['vllm_router']}"]


def router_lock() -> str:
    return f"vllm-router-{_engine_data.companions()['vllm_router']}"


def master_packages() -> list[str]:
    variant = _engine_data.companions()["mooncake"]["none"]
    return [f"{variant['package']}=={variant['version']}"]


def master_lock() -> str:
    return f"mooncake-master-{_engine_data.companions()['mooncake']['none']['version']}"


def uv_packages() -> list[str]:
    return [f"uv=={_engine_data.companions()['uv']}"]


def uv_lock() -> str:
    return f"uv-{_engine_data.companions()['uv']}"


def all_locks() -> dict[str, list[str]]:
    """Lock name -> top-level pins, for every venv any plan of the supported versions can hold."""
    locks = {simulator_lock(): simulator_packages(), router_lock(): router_packages(),
             master_lock(): master_packages(), uv_lock(): uv_packages()}
    for version in _engine_data.supported_versions():
        engine = _engine_data.support_table()[version]
        transports: list[str | None] = [None] if "aggregated" in engine.layouts else []
        if "pd" in engine.layouts:
            transports += sorted(engine.kv_connectors)
        for transport in transports:
            locks[engine_lock(engine, transport)] = engine_packages(engine, transport)
    return dict(sorted(locks.items()))


def lock_path(name: str, platform: str):
    return LOCK_DIR / platform / f"{name}.txt"


@functools.cache
def unavailable(platform: str) -> dict[str, str]:
    """Lock name -> why it could not be made for this platform (``make lock`` records the resolver's words)."""
    path = LOCK_DIR / platform / UNAVAILABLE
    if not path.is_file():
        return {}
    return {str(name): " ".join(str(why).split()) for name, why in (_engine_data._load_yaml(path) or {}).items()}


@functools.cache
def lock_entry(name: str, platform: str) -> dict:
    """What the plan says of one lock: its file (under data/locks/), the platform and the sha256 of its text.

    The sha256 names the controller's wheel set and is recorded in the venv's marker: a new lock
    (``make lock``) rebuilds the venv on the next deploy. A lock file that is missing (and not listed as
    unavailable, which the planner refuses first) is a collection bug.
    """
    path = lock_path(name, platform)
    return {"name": name, "platform": platform, "file": f"{platform}/{path.name}",
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def every_platform_lock() -> list[tuple[str, str]]:
    """(platform, lock name) for every lock ``make lock`` makes."""
    return [(platform, name) for platform in _platforms.platform_ids() for name in all_locks()]
