# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: converge_look
short_description: What the no-op check looks at on one host
version_added: 0.1.0
description:
  - From the host's footprint and its part of the plan, C(files), C(directories), C(units), C(venvs), the
    artifact C(trees) it receives, its kernel-settings file (C(sysctl)), its C(firewall) table and the C(health)
    URLs it serves. The P(vllm_omni.serve.converge_state#module) module takes this as I(look).
  - An empty dict for a host the plan gives nothing.
extends_documentation_fragment:
  - vllm_omni.serve.plan_input.host
"""

EXAMPLES = r"""
- name: Converge | this host against what the last whole deploy left
  vllm_omni.serve.converge_state:
    state: check
    path: "{{ vllm_omni_plan.paths.converge_record }}"
    look: "{{ vllm_omni_plan | vllm_omni.serve.converge_look(inventory_hostname) }}"
    digest: "{{ hostvars['localhost'].converge_fleet_digest }}"
"""

RETURN = r"""
_value:
  description: Lists of paths, units and URLs to look at, by kind.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._inventory import plain
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime._converge import host_look


def converge_look(plan, host):
    if not isinstance(plan, dict) or "footprint" not in plan:
        raise AnsibleFilterError("converge_look expects the plan (with its footprint section) as input")
    return plain(host_look(plan, str(host)))


class FilterModule:
    def filters(self):
        return {"converge_look": converge_look}
