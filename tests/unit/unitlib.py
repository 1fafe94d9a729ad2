"""Helpers the unit tests share: build planner input the way the playbooks do.

Imports nothing from the controller side at load time: ansible-test units runs
tests/unit/plugins/modules/ with only module code importable. The helpers that plan import the
planner when called.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"


def inventory(hosts: dict[str, dict], group_vars: dict | None = None, router: list[str] | None = None) -> dict:
    """Planner input from Python dicts: hosts -> host vars; group_vars apply to every host."""
    hostvars = {}
    for name, host_vars in hosts.items():
        merged = copy.deepcopy(group_vars or {})
        merged.update(copy.deepcopy(host_vars))
        hostvars[name] = merged
    for name in router or []:
        hostvars.setdefault(name, {"ansible_host": "10.0.9.1"})
    return {"engine_hosts": list(hosts), "router_hosts": list(router or []), "hostvars": hostvars}


def one_host(gpus=(0, 1, 2), ip="10.0.0.11", **settings) -> dict:
    return inventory({"gpu-a": {"ansible_host": ip, "vllm_omni_gpus": list(gpus)}}, settings)


def problems_of(inv: dict) -> list[str]:
    """The problem lines build_plan reports; fails the test when it plans successfully."""
    from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
    from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._problems import PlanError

    with pytest.raises(PlanError) as caught:
        build_plan(inv)
    return [p.line() for p in caught.value.problems]


def deployment_of(**values):
    """The Deployment the planner makes from these settings on one engine host (the rest default); fails the test
    when they have a problem."""
    from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan import _validate
    from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._problems import Problems

    problems = Problems()
    settings, sources = _validate.deployment_settings(["h"], {"h": values}, problems)
    context = _validate.deployment(settings, sources, problems)
    assert not problems.items, [p.line() for p in problems.items]
    return context


def gpu_facts(profile: str, apps: str = "", banner: str | None = None) -> dict:
    """GPU facts from a recorded nvidia-smi profile (tests/fixtures/gpu/<profile>/), as discovery builds them."""
    from ansible_collections.vllm_omni.serve.plugins.module_utils import _gpu

    path = FIXTURES / "gpu" / profile
    return _gpu.build_facts((path / "query-gpu.csv").read_text(), apps, banner or (path / "nvidia-smi.txt").read_text(),
                            (path / "topo-m.txt").read_text(), 1024)


def in_fresh_interpreters(script: str, seeds: tuple[str, ...] = ("0", "1", "2")) -> list[str]:
    """What ``script`` prints in a new interpreter per hash seed. Sets and dicts of strings iterate in hash
    order, which differs between processes; two calls in one process share it, so only this shows a result
    that depends on it."""
    import os
    import subprocess
    import sys
    outputs = []
    for seed in seeds:
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        outputs.append(done.stdout)
    return outputs


class ModuleExit(Exception):
    """A module's exit_json or fail_json, caught: ``kind`` is "exit" or "fail", ``result`` its keywords."""

    def __init__(self, kind, result):
        super().__init__(kind)
        self.kind, self.result, self.calls = kind, result, []


def run_gpu_module(monkeypatch, main, data_dir, binary="/usr/bin/nvidia-smi", **params) -> ModuleExit:
    """A GPU discovery module's main() (nvidia_gpu_facts, host_facts) with nvidia-smi answering as the lab's stand-in
    does with ``data_dir``'s captures; ``binary=None`` is a host without nvidia-smi. The result's ``calls`` lists
    nvidia-smi's argument lists."""
    import subprocess
    import sys

    from ansible.module_utils import basic
    from ansible.module_utils.testing import patch_module_args

    calls = []
    real_get_bin_path, real_run_command = basic.AnsibleModule.get_bin_path, basic.AnsibleModule.run_command

    def get_bin_path(self, name, required=False, opt_dirs=None):
        return binary if name == "nvidia-smi" else real_get_bin_path(self, name, required, opt_dirs)

    def run_command(self, argv, **kwargs):
        if argv[0] != binary:  # not nvidia-smi: Ansible's own fact collectors
            return real_run_command(self, argv, **kwargs)
        calls.append(argv[1:])
        env = {"FAKE_NVIDIA_SMI_DIR": str(data_dir), "PATH": "/usr/bin:/bin"}
        result = subprocess.run([sys.executable, str(REPO / "tests" / "lab" / "fake_nvidia_smi.py"), *argv[1:]],
                                capture_output=True, text=True, env=env, check=False)
        return result.returncode, result.stdout, result.stderr

    def leave(kind):
        def raise_it(self, **result):
            raise ModuleExit(kind, result)
        return raise_it

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", leave("exit"))
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", leave("fail"))
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", get_bin_path)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    with patch_module_args(params), pytest.raises(ModuleExit) as caught:
        main()
    caught.value.calls = calls
    return caught.value
