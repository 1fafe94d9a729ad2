#!/usr/bin/python
# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: host_facts
short_description: Discover in one call what the planner reads from a host, its OS and its NVIDIA GPUs
version_added: 0.1.0
description:
  - The discovery of every deploy (C(playbooks/facts.yml)), one module call per host where it took three
    (C(ansible.builtin.setup), a shell look for C(nvidia-smi), M(vllm_omni.serve.nvidia_gpu_facts)).
  - Returns C(vllm_omni_os_facts) (what the planner matches against the collection's supported platforms) and Ansible's
    own distribution and platform facts, read by Ansible's own collectors, so C(ansible_facts.distribution),
    C(os_family), C(distribution_major_version), C(architecture) and the like hold what C(setup) would give.
  - With O(gpus), also C(vllm_omni_gpu_facts), as M(vllm_omni.serve.nvidia_gpu_facts) returns them, when C(nvidia-smi)
    is installed. Without it the host has no GPU facts and the planner reads the inventory's C(vllm_omni_gpus).
  - Fails with one clear message when C(nvidia-smi) is installed but cannot reach the GPUs.
  - With O(converge_record), also takes the no-op check's look in the same call (C(converge_taken)), so that a
    deploy that finds nothing to do reaches each host once; M(vllm_omni.serve.converge_state) then judges it on
    the controller.
  - Read-only; runs the same in check mode.
options:
  gpus:
    description: Also discover the NVIDIA GPUs (engine hosts).
    type: bool
    default: true
  converge_record:
    description:
      - The record the last whole deploy left on the host (the plan's C(paths.converge_record)). Its look is taken
        again and compared with its snapshot here; what the record was made from is returned only as
        fingerprints (SHA-256), and only root can read it (the play needs C(become)).
    type: str
extends_documentation_fragment:
  - vllm_omni.serve.nvidia_smi
  - vllm_omni.serve.attributes.read_only
author:
  - vllm_omni.serve contributors (@vllm-omni-serve)
"""

EXAMPLES = r"""
- name: The OS, and the GPUs of engine hosts
  vllm_omni.serve.host_facts:
    gpus: "{{ inventory_hostname in groups['vllm_omni'] }}"

- name: The OS, the GPUs and the no-op check's look, in one call
  vllm_omni.serve.host_facts:
    converge_record: /var/lib/vllm-omni/converge.json
  become: true
  register: facts_host

- name: The platform the planner will match
  ansible.builtin.debug:
    msg: "{{ vllm_omni_os_facts.distribution }} {{ vllm_omni_os_facts.major }} on {{ vllm_omni_os_facts.machine }}"
"""

RETURN = r"""
converge_taken:
  description:
    - With O(converge_record), what the record says and the host holds now, for
      M(vllm_omni.serve.converge_state)'s O(vllm_omni.serve.converge_state#module:taken).
    - C(path) (the record's), C(record) (whether there is one); with one, C(digest) and C(look) (fingerprints of
      what it was made from) and C(reasons) (what differs from its snapshot, and each health URL that does not
      answer).
  returned: when O(converge_record) is set and the record, if any, can be read
  type: dict
  sample: {"path": "/var/lib/vllm-omni/converge.json", "record": true, "digest": "9f2c...", "look": "41ab...",
           "reasons": []}
ansible_facts:
  description: The host's OS and, when asked for and C(nvidia-smi) is installed, its GPUs.
  returned: success
  type: complex
  contains:
    vllm_omni_os_facts:
      description: C(distribution), C(major), C(version) (strings, as Ansible names them) and C(machine) (Ansible's
        C(architecture)).
      type: dict
      returned: success
      sample: {"distribution": "Ubuntu", "major": "24", "version": "24.04", "machine": "x86_64"}
    vllm_omni_gpu_facts:
      description: As M(vllm_omni.serve.nvidia_gpu_facts) returns it.
      type: dict
      returned: when O(gpus) and nvidia-smi is installed
    ansible_distribution:
      description:
        - One of Ansible's distribution facts (C(ansible_distribution), C(ansible_distribution_version),
          C(ansible_distribution_major_version), C(ansible_distribution_release), C(ansible_os_family), ...) and
          platform facts (C(ansible_architecture), C(ansible_machine), C(ansible_system), C(ansible_kernel), ...), as
          C(setup) returns them; plays read them as C(ansible_facts.distribution) and so on.
      type: str
      returned: success
      sample: Ubuntu
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.facts.system.distribution import DistributionFactCollector
from ansible.module_utils.facts.system.platform import PlatformFactCollector

from ansible_collections.vllm_omni.serve.plugins.module_utils._converge import take_record
from ansible_collections.vllm_omni.serve.plugins.module_utils._nvidia_smi import ARGUMENT_SPEC, GpuFacts, find_nvidia_smi


def os_facts(module: AnsibleModule) -> dict:
    """Ansible's own distribution and platform facts, and the planner's four values taken from them."""
    found = {**PlatformFactCollector().collect(module=module), **DistributionFactCollector().collect(module=module)}
    # Prefixed as setup's are: Ansible files them under ansible_facts without the prefix, and they do not become
    # top-level variables such as `hostname` or `system`.
    facts = {f"ansible_{name}": value for name, value in found.items()}
    facts["vllm_omni_os_facts"] = {
        "distribution": found.get("distribution"),
        "major": str(found.get("distribution_major_version")),
        "version": str(found.get("distribution_version")),
        "machine": found.get("architecture"),
    }
    return facts


def main():
    module = AnsibleModule(argument_spec={"gpus": {"type": "bool", "default": True},
                                          "converge_record": {"type": "str"}, **ARGUMENT_SPEC},
                           supports_check_mode=True)
    facts = os_facts(module)
    binary = find_nvidia_smi(module) if module.params["gpus"] else None
    if binary:
        facts["vllm_omni_gpu_facts"] = GpuFacts(module, binary).facts()
    taken = take_record(module.params["converge_record"]) if module.params["converge_record"] else None
    module.exit_json(changed=False, ansible_facts=facts, **({"converge_taken": taken} if taken is not None else {}))


if __name__ == "__main__":
    main()
