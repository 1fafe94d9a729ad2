"""The device machine's layout with the stand-in engine, for the rehearsals of the device scripts (tests/unit/harness).

A module of its own, not imported from one test module by another: ansible-test units imports test modules as
packages of the collection, where a test module's own directory is not on the path.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest
from testlib import REPO, load_ansible_inventory

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host._names import ENGINE_HOME
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts._render import render_tree


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


_CLEANUP: list[Path] = []
# Each rehearsal's roots: /srv/vllm-omni-serve-NAME-PID (PID: the test process that made them).
ROOTS_PARENT, ROOTS_PREFIX = "/srv", "vllm-omni-serve-"


def request_cleanup(path: Path) -> None:
    """Remove ``path`` once the test module is done (tests/unit/harness/conftest.py)."""
    _CLEANUP.append(path)


def remove_requested_roots() -> None:
    while _CLEANUP:
        shutil.rmtree(_CLEANUP.pop(), ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_roots_of_ended_processes() -> None:
    """The roots of every test process that has ended. ansible-test units runs each test in a fork of its own
    (ansible_forked): a root made there is named after the fork, and the fork exits without the module's
    teardown unless it ran the module's last test. Run at the end of the session, in the process that forked."""
    for path in Path(ROOTS_PARENT).glob(f"{ROOTS_PREFIX}*"):
        pid = path.name.rsplit("-", 1)[-1]
        if pid.isdigit() and (int(pid) == os.getpid() or not _alive(int(pid))):
            shutil.rmtree(path, ignore_errors=True)


def stand_in_device(tmp: Path, name: str, inventory: str = "pd-text", ports: bool = True) -> tuple[dict, Path, dict]:
    """The device machine's layout with the stand-in engine: the render of tests/device/inventories/INVENTORY.yml
    (its roots under /srv, removed after; pd-text in tmp/render, any other in tmp/render-INVENTORY), /srv/stage as
    the payload would unpack it, and the environment the device scripts read. ``ports``: free ports of this
    machine for the API and bootstrap (not wanted in a network namespace of its own, where the plan's are free)."""
    if os.geteuid() != 0:
        pytest.skip(f"the plan's engine home {ENGINE_HOME} needs root (CI runs as root)")
    # The plan's roots may not live in /tmp (anyone could plant them there): a directory of our own, removed after.
    roots = Path(ROOTS_PARENT) / f"{ROOTS_PREFIX}{name}-{os.getpid()}"
    request_cleanup(roots)
    extra = {"vllm_omni_install_root": str(roots / "opt"), "vllm_omni_config_root": str(roots / "etc"),
             "vllm_omni_hf_home": str(roots / "hf")}
    if ports:
        extra.update(vllm_omni_api_port_base=free_port(), vllm_omni_bootstrap_port_base=free_port())
        if "nixl" in inventory:
            extra.pop("vllm_omni_bootstrap_port_base")  # NIXL plans none (a warning otherwise)
            extra["vllm_omni_nixl_side_channel_port_base"] = free_port()
    plan = build_plan(load_ansible_inventory(REPO / "tests" / "device" / "inventories" / f"{inventory}.yml",
                                             extra_vars=extra))
    render = tmp / ("render" if inventory == "pd-text" else f"render-{inventory}")
    for path, text in render_tree(plan).items():
        (render / path).parent.mkdir(parents=True, exist_ok=True)
        (render / path).write_text(text)
    stage = tmp / "stage"
    if not stage.exists():
        (stage / "lib").mkdir(parents=True)
        os.symlink(REPO / "tests" / "fixtures" / "fake_engine", stage / "site")
        (tmp / "torch").mkdir()
    env = {**os.environ, "DEVICE_STAGE": str(stage), "DEVICE_TORCH_SITE": str(tmp / "torch"),
           "PYTHONUNBUFFERED": "1"}
    return plan, render, env
