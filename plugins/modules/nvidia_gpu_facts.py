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
extends_documentation_fragment:
  - vllm_omni.serve.nvidia_smi
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

from ansible_collections.vllm_omni.serve.plugins.module_utils._nvidia_smi import ARGUMENT_SPEC, GpuFacts, find_nvidia_smi


def build_module() -> AnsibleModule:
    return AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)


def main():
    module = build_module()
    binary = find_nvidia_smi(module)
    if not binary:
        module.fail_json(msg=f"{module.params['nvidia_smi']} was not found: install the NVIDIA driver on this host "
                             "(it provides nvidia-smi), or list the GPUs in vllm_omni_gpus to skip discovery")
    module.exit_json(changed=False, ansible_facts={"vllm_omni_gpu_facts": GpuFacts(module, binary).facts()})


if __name__ == "__main__":
    main()
