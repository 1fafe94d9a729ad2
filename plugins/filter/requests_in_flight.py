# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: requests_in_flight
short_description: How many requests a pipeline still serves, from its Prometheus /metrics text
version_added: 0.1.0
description:
  - Sums C(vllm:num_requests_running) and C(vllm:num_requests_waiting) (vLLM-Omni) or C(xpyd_sim_active_requests)
    (simulator). Fails when none is present, rather than declare a pipeline drained without knowing.
options:
  _input:
    description: The text of GET /metrics.
    type: str
    required: true
seealso:
  - plugin: vllm_omni.serve.strip_secrets
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Wait until drained
  ansible.builtin.uri:
    url: "{{ pipeline.url }}/metrics"
    return_content: true
  register: metrics
  until: (metrics.content | vllm_omni.serve.requests_in_flight) == 0
  retries: 60
  delay: 2
"""

RETURN = r"""
_value:
  description: Requests running or waiting.
  type: int
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime import _upgrade


def requests_in_flight(metrics):
    try:
        return _upgrade.requests_in_flight(str(metrics))
    except ValueError as error:
        raise AnsibleFilterError(str(error)) from None


class FilterModule:
    def filters(self):
        return {"requests_in_flight": requests_in_flight}
