# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: status_queries
short_description: The PromQL queries status.yml asks the deployment's Prometheus
version_added: 0.1.0
description:
  - Per pipeline over the last 5 minutes, along a client's text path - TTFT p50 and p99 (pd - prefill's plus
    decode's), ITL p50 and generated tokens per second of the stage that writes the text, from the engines'
    C(/metrics) as Prometheus scraped them. Empty where the plan runs no Prometheus.
  - The answers go to P(vllm_omni.serve.status_document#filter) as its C(metrics).
extends_documentation_fragment:
  - vllm_omni.serve.plan_input
seealso:
  - plugin: vllm_omni.serve.status_document
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Status | ask Prometheus
  ansible.builtin.uri:
    url: "{{ prometheus_url }}/api/v1/query"
    method: POST
    body_format: form-urlencoded
    body: {query: "{{ item.value }}"}
  loop: "{{ vllm_omni_plan | vllm_omni.serve.status_queries | dict2items }}"
"""

RETURN = r"""
_value:
  description: Result key (C(ttft_p50_s), C(ttft_p99_s), C(itl_p50_s), C(generation_tokens_per_s)) -> PromQL.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime import _status


def status_queries(plan):
    if not isinstance(plan, dict) or "monitoring" not in plan:
        raise AnsibleFilterError("status_queries expects the plan as input")
    return _status.queries(plan["layout"]) if plan["monitoring"].get("enabled") else {}


class FilterModule:
    def filters(self):
        return {"status_queries": status_queries}
