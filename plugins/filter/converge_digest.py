# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: converge_digest
short_description: The digest of what a deploy is made from, for the no-op check
version_added: 0.1.0
description:
  - SHA-256 over the plan, every file of the collection a deploy runs (plugins, roles, playbooks, data, meta),
    the front door's TLS material on the controller and the listing (names, sizes, change times) of a model
    directory the operator stages from. A generated front-door certificate that a deploy would renew
    (within the plan's renewal window, C(vllm_omni_tls_certificate_renew_days)) makes it differ from the last
    record, so that deploy runs. Each host's operator
    variables are added by the P(vllm_omni.serve.converge_state#module) action.
  - Computed once per run, on the controller.
extends_documentation_fragment:
  - vllm_omni.serve.plan_input
"""

EXAMPLES = r"""
- name: Converge | the digest of what this deploy is made from
  ansible.builtin.set_fact:
    converge_fleet_digest: "{{ vllm_omni_plan | vllm_omni.serve.converge_digest }}"
  delegate_to: localhost
  delegate_facts: true
  run_once: true
"""

RETURN = r"""
_value:
  description: A hexadecimal SHA-256.
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._inventory import plain
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime._converge import fleet_digest


def converge_digest(plan):
    if not isinstance(plan, dict) or "artifacts" not in plan:
        raise AnsibleFilterError("converge_digest expects the plan as input")
    try:
        return fleet_digest(plain(plan))
    except OSError as error:
        raise AnsibleFilterError(f"converge_digest: cannot read {error.filename}: {error.strerror}") from None


class FilterModule:
    def filters(self):
        return {"converge_digest": converge_digest}
