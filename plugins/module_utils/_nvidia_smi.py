# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Run nvidia-smi on the host and build the GPU facts (the nvidia_gpu_facts and host_facts modules).

_gpu.py reads nvidia-smi's output (pure, shared with the planner); this runs it, through the module, and
finds which GPU processes are the deployment's own.
"""

from __future__ import annotations

from ansible_collections.vllm_omni.serve.plugins.module_utils._gpu import (
    APP_FIELDS,
    QUERY_FIELDS,
    GpuParseError,
    build_facts,
    parse_compute_apps,
)
from ansible_collections.vllm_omni.serve.plugins.module_utils._host import owner_unit

LOCALE = {"LANGUAGE": "C", "LC_ALL": "C"}
NO_DRIVER = ("couldn't communicate with the NVIDIA driver", "No devices were found", "driver/library version mismatch")
# The options both modules take (documented once: doc fragment vllm_omni.serve.nvidia_smi).
ARGUMENT_SPEC = {
    "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
    "busy_memory_mib": {"type": "int", "default": 1024},
    "topology": {"type": "bool", "default": True},
    "own_units": {"type": "list", "elements": "str", "default": []},
}


class GpuFacts:
    """nvidia-smi's banner, GPU and process queries and topology, read into ``vllm_omni_gpu_facts``."""

    def __init__(self, module, binary: str):
        self.module = module
        self.binary = binary

    def run(self, *args: str) -> str:
        rc, stdout, stderr = self.module.run_command([self.binary, *args], environ_update=LOCALE)
        if rc != 0:
            text = (stdout + stderr).strip()
            if any(marker in text for marker in NO_DRIVER):
                self.module.fail_json(msg=f"nvidia-smi cannot reach the GPUs ({text.splitlines()[0] if text else rc}): "
                                          "load the NVIDIA kernel driver (nvidia-smi must list the GPUs) and retry",
                                      rc=rc, stdout=stdout, stderr=stderr)
            self.module.fail_json(msg=f"nvidia-smi {' '.join(args)} failed with rc={rc}", rc=rc, stdout=stdout,
                                  stderr=stderr)
        return stdout

    def owners(self, apps: list[dict]) -> dict[int, str]:
        """pid -> vllm-omni@ unit, for GPU processes that are this deployment's own pipelines."""
        found = {}
        for app in apps:
            try:
                with open(f"/proc/{app['pid']}/cgroup", encoding="utf-8") as handle:
                    unit = owner_unit(handle.read(), self.module.params["own_units"])
            except OSError:  # gone, or another PID namespace (containers): not ours to claim
                continue
            if unit:
                found[app["pid"]] = unit
        return found

    def facts(self) -> dict:
        banner = self.run()
        query = self.run(f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader,nounits")
        apps = self.run(f"--query-compute-apps={','.join(APP_FIELDS)}", "--format=csv,noheader,nounits")
        topo = self.run("topo", "-m") if self.module.params["topology"] else None
        try:
            owners = self.owners(parse_compute_apps(apps))
            return build_facts(query, apps, banner, topo, self.module.params["busy_memory_mib"], owners)
        except GpuParseError as error:
            self.module.fail_json(msg=f"could not read nvidia-smi's output: {error}", query=query, topology=topo)
        return {}  # not reached: fail_json exits


def find_nvidia_smi(module) -> str | None:
    """nvidia-smi's path (PATH, then the sbin directories), or None where the driver's tools are not installed."""
    return module.get_bin_path(module.params["nvidia_smi"], required=False)
