# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: present_groups
short_description: A play's host pattern over the collection's groups, without the groups this inventory lacks
version_added: 0.1.0
description:
  - The collection's plays run on groups an inventory may not have (C(vllm_omni_router), C(vllm_omni_mooncake_master),
    C(vllm_omni_monitoring), and the C(vllm_omni_planned_*) groups the plan play makes only where the plan has such
    hosts). Ansible warns "Could not match supplied host pattern" for each absent group, although nothing is wrong.
  - Returns the union of the groups of O(_input) that O(groups) holds, joined with C(:); C(all:!all) (no host, no
    warning) when it holds none of them.
options:
  _input:
    description: Group names joined with C(:), a union (no C(!) or C(&) terms).
    type: str
    required: true
  groups:
    description: Ansible's C(groups) variable.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Router hosts, where the plan has any
  hosts: "{{ 'vllm_omni_planned_router' | vllm_omni.serve.present_groups(groups) }}"
  tasks: []
"""

RETURN = r"""
_value:
  description: A host pattern.
  type: str
"""

from ansible.errors import AnsibleFilterError

NO_HOSTS = "all:!all"


def present_groups(pattern, groups):
    if not isinstance(pattern, str) or any(mark in pattern for mark in "!&,"):
        raise AnsibleFilterError(f"present_groups: expects group names joined with ':', got {pattern!r}")
    if not hasattr(groups, "keys"):
        raise AnsibleFilterError("present_groups: expects Ansible's groups variable as its argument")
    present = [name for name in pattern.split(":") if name and name in groups]
    return ":".join(present) or NO_HOSTS


class FilterModule:
    def filters(self):
        return {"present_groups": present_groups}
