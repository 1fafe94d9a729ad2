# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: plan_summary
short_description: Human-readable summary of a vLLM-Omni deployment plan
version_added: 0.1.0
description:
  - Lines for C(ansible.builtin.debug) showing what you set versus what the collection computed, then
    per host the pipelines with their GPUs, ports and URLs, then any warnings.
options:
  _input:
    description: A plan from the P(vllm_omni.serve.plan#filter) filter.
    type: dict
    required: true
seealso:
  - plugin: vllm_omni.serve.plan
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Show the plan
  ansible.builtin.debug:
    msg: "{{ vllm_omni_plan | vllm_omni.serve.plan_summary }}"
"""

RETURN = r"""
_value:
  description: Summary lines.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._summary import summary_lines


def plan_summary(plan):
    if not isinstance(plan, dict) or "hosts" not in plan:
        raise AnsibleFilterError("plan_summary expects the output of the vllm_omni.serve.plan filter")
    return summary_lines(plan)


class FilterModule:
    def filters(self):
        return {"plan_summary": plan_summary}
