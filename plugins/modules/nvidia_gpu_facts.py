#!/usr/bin/python
# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: nvidia_gpu_facts
short_description: Discover a host's NVIDIA GPUs, their memory, busy state and topology
version_added: 0.1.0
description:
  - Runs C(nvidia-smi) (banner, C(--query-gpu), C(--query-compute-apps), C(topo -m)) and returns the
    GPUs with memory, compute capability, running compute processes and a busy flag, the GPU link
    matrix (NVLink / PCIe kinds), NVLink islands, each GPU's CPU and NUMA affinity, and the driver's
    CUDA version and major.
  - Processes running in this collection's own C(vllm-omni@) units (found through their cgroup) are
    reported with their unit and do not make a GPU busy, so a re-deploy does not refuse its own GPUs.
  - Fails with one clear message when C(nvidia-smi) is missing or the driver is not loaded.
  - Read-only; runs the same in check mode.
options:
  nvidia_smi:
    description: The nvidia-smi executable (looked up on PATH when a bare name).
    type: str
    default: nvidia-smi
  busy_memory_mib:
    description: A GPU with more memory in use than this (MiB) counts as busy, even without listed processes.
    type: int
    default: 1024
  topology:
    description: Also run C(nvidia-smi topo -m) for links and affinity.
    type: bool
    default: true
  own_units:
    description:
      - The deployment's unit names (the plan's C(own_units); C(name@.service) stands for every instance). GPU processes
        in one of them are the deployment's own and do not make a GPU busy. With none given, every process counts.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - vllm_omni.serve.attributes.read_only
author:
  - vllm_omni.serve contributors (@vllm-omni-serve)
"""

EXAMPLES = r"""
- name: Discover GPUs
  vllm_omni.serve.nvidia_gpu_facts:

- name: Show the free GPUs
  ansible.builtin.debug:
    msg: "{{ vllm_omni_gpu_facts.gpus | rejectattr('busy') | map(attribute='index') | list }}"
"""

RETURN = r"""
ansible_facts:
  description: C(vllm_omni_gpu_facts).
  returned: success
  type: complex
  contains:
    vllm_omni_gpu_facts:
      description:
        - C(driver_version), C(cuda_version), C(cuda_major), C(count), C(busy_memory_mib).
        - C(gpus), one dict per GPU with C(index), C(uuid), C(name), C(pci_bus_id), C(memory_total_mib),
          C(memory_used_mib), C(compute_cap), C(persistence_mode), C(mig_mode), C(processes), C(busy),
          C(busy_reasons), and with topology C(cpu_affinity) and C(numa_node).
        - With topology, C(links) (GPU index to GPU index to link kind such as C(NV18), C(PIX), C(SYS)),
          C(nvlink_islands) (lists of GPU indices) and C(nics).
      type: dict
      returned: success
"""

from ansible.module_utils.basic import AnsibleModule

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


class GpuFacts:
    def __init__(self, module: AnsibleModule):
        self.module = module
        self.binary = module.get_bin_path(module.params["nvidia_smi"], required=False)
        if not self.binary:
            module.fail_json(msg=f"{module.params['nvidia_smi']} was not found: install the NVIDIA driver on this host "
                                 "(it provides nvidia-smi), or list the GPUs in vllm_omni_gpus to skip discovery")

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


def build_module() -> AnsibleModule:
    return AnsibleModule(
        argument_spec={
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "busy_memory_mib": {"type": "int", "default": 1024},
            "topology": {"type": "bool", "default": True},
            "own_units": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )


def main():
    module = build_module()
    module.exit_json(changed=False, ansible_facts={"vllm_omni_gpu_facts": GpuFacts(module).facts()})


if __name__ == "__main__":
    main()
