# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: plan
short_description: Compute the vLLM-Omni deployment plan from the inventory
version_added: 0.1.0
description:
  - Validates every C(vllm_omni_*) setting of the hosts in groups C(vllm_omni) and C(vllm_omni_router)
    and computes the deployment plan (pipelines, GPU sets, stage layout, ports, KV-transfer settings,
    environment, engine argv and stage-config documents). Pure and deterministic; touches no host.
  - On bad input it fails with one error that lists every problem, each naming the host, the variable
    and the fix.
  - The settings are documented in C(docs/variables.md) of the collection.
options:
  _input:
    description: The C(hostvars) magic variable.
    type: dict
    required: true
  groups:
    description: The C(groups) magic variable.
    type: dict
    required: true
seealso:
  - plugin: vllm_omni.serve.plan_summary
    plugin_type: filter
  - module: vllm_omni.serve.render_plan
"""

EXAMPLES = r"""
- name: Compute the plan once, on the controller
  ansible.builtin.set_fact:
    vllm_omni_plan: "{{ hostvars | vllm_omni.serve.plan(groups) }}"
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
_value:
  description:
    - The plan. Keys C(layout), C(engine) (version, schema, config flag), C(backend), C(model),
      C(served_model_name), C(settings) (value and source of each deployment setting), C(hosts)
      (per host C(ip), C(gpus), C(unused_gpus), C(listen_ports) and C(pipelines)), C(router),
      C(worker_urls) and C(warnings).
    - Each pipeline has C(name), C(unit), C(gpus), C(stages), C(ports), C(kv_ip), C(url), C(paths),
      C(environment), C(argv) and C(stage_config).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._inventory import inventory_from_hostvars
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._problems import PlanError


def plan(hostvars, groups):
    try:
        return build_plan(inventory_from_hostvars(hostvars, groups))
    except PlanError as error:
        raise AnsibleFilterError(str(error)) from None


class FilterModule:
    def filters(self):
        return {"plan": plan}
