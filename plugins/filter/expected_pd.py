# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: expected_pd
short_description: The prefill/decode pair and bootstrap address the engine must detect
version_added: 0.1.0
description:
- For M(vllm_omni.serve.config_check)'s C(expected_pd) option. C(pair) is C([0, 1]) and C(bootstrap) the C(kv_ip:bootstrap_port)
  of the prefill engine the pipeline's config names in the pd layout; C(pair) is null otherwise. C(kv_connector) is the
  class both PD stages load; C(orchestrator) is false for a headless stage of a distributed pipeline (it runs no orchestrator).
options:
  plan:
    description: The whole plan (for its layout).
    type: dict
    required: true
extends_documentation_fragment:
  - vllm_omni.serve.plan_input.pipeline
seealso:
- plugin: vllm_omni.serve.expected_stages
  plugin_type: filter
"""

EXAMPLES = r"""
- name: Expected PD wiring of a pipeline
  ansible.builtin.debug:
    msg: "{{ pipeline | vllm_omni.serve.expected_pd(vllm_omni_plan) }}"
"""

RETURN = r"""
_value:
  description: C(pair) and, for pd, C(bootstrap), C(kv_connector) and C(orchestrator).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._inventory import plain
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime import _expect


def expected_pd(pipeline, plan):
    if not isinstance(pipeline, dict) or "stages" not in pipeline:
        raise AnsibleFilterError("expects one pipeline of the plan (vllm_omni_plan.hosts[host].pipelines[i])")
    if not isinstance(plan, dict) or "layout" not in plan:
        raise AnsibleFilterError("expected_pd takes the plan: pipeline | vllm_omni.serve.expected_pd(vllm_omni_plan)")
    return _expect.expected_pd(plain(pipeline), plain(plan))


class FilterModule:
    def filters(self):
        return {"expected_pd": expected_pd}
