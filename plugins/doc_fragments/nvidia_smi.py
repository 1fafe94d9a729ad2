# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """The GPU discovery options of nvidia_gpu_facts and host_facts (module_utils/_nvidia_smi.ARGUMENT_SPEC)."""

    # vllm_omni.serve.nvidia_smi
    DOCUMENTATION = r"""
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
"""
