# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: role_plan
short_description: A role's part of the deployment plan, for one host
version_added: 0.1.0
description:
  - The plan sections the role declares in its C(meta/argument_specs.yml) (the options of C(vllm_omni_plan), over
    its entry points), each as far as the host needs it. Sections keyed by host (C(hosts), C(footprint),
    C(os_packages), C(host_platforms), ...) keep the host's own entry (C(hosts) also the hosts it shares a spanning
    pipeline with); C(firewall), C(selinux), C(self_heal) and C(gpu_metrics) keep the host's own C(per_host) entry. A monitoring
    host and a host the plan does not deploy to (the controller) keep every host.
  - C(playbooks/vars/plan.yml) gives every role of the collection its part this way, so Ansible validates (and
    deep-copies) a part whose size does not grow with the fleet at each role start, and a role reads only what
    it declares.
  - A role that is not one of the collection's, or none (a play's own tasks), gets the whole plan.
options:
  _input:
    description: The plan.
    type: dict
    required: true
  role:
    description: The role, as C(ansible_role_name) names it (C(vllm_omni.serve.engine)); empty outside a role.
    type: str
    required: true
  host:
    description: Inventory name of the host the role runs for; none for the whole fleet.
    type: str
"""

EXAMPLES = r"""
# playbooks/vars/plan.yml
vllm_omni_plan: "{{ plan_result.plan | vllm_omni.serve.role_plan(ansible_role_name | default(''), inventory_hostname) }}"
"""

RETURN = r"""
_value:
  description: Section name -> the section (or its part for the host).
  type: dict
"""

import functools
from pathlib import Path

import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime import _role_plan

ROLES = Path(__file__).resolve().parents[2] / "roles"
PREFIX = "vllm_omni.serve."


@functools.cache
def _sections(role: str):
    """The sections ``role`` declares; None for a role that is not the collection's or declares no plan."""
    if not role.startswith(PREFIX):
        return None
    spec = ROLES / role[len(PREFIX):] / "meta" / "argument_specs.yml"
    if not spec.is_file():
        return None
    sections = _role_plan.declared_sections(yaml.safe_load(spec.read_text()).get("argument_specs") or {})
    return sections or None


def role_plan(plan, role, host=None):
    if not isinstance(plan, dict) and not hasattr(plan, "items"):
        raise AnsibleFilterError("role_plan expects the plan as input")
    return _role_plan.role_plan(plan, _sections(str(role or "")), None if host is None else str(host))


class FilterModule:
    def filters(self):
        return {"role_plan": role_plan}
