# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: expected_stages
short_description: The stages the engine must resolve from a pipeline's stage config
version_added: 0.1.0
description:
  - For M(vllm_omni.serve.config_check)'s C(expected_stages) option; each stage's C(id), C(model_stage),
    C(devices), C(tensor_parallel_size) and C(inputs) as the plan placed them.
extends_documentation_fragment:
  - vllm_omni.serve.plan_input.pipeline
seealso:
  - plugin: vllm_omni.serve.expected_pd
    plugin_type: filter
  - module: vllm_omni.serve.config_check
"""

EXAMPLES = r"""
- name: Check a candidate config against the plan
  vllm_omni.serve.config_check:
    venv: "{{ vllm_omni_plan.backend.venv }}"
    config: /etc/vllm-omni/omni0/stage_config.yaml.candidate
    config_flag: "{{ vllm_omni_plan.engine.config_flag }}"
    expected_stages: "{{ pipeline | vllm_omni.serve.expected_stages }}"
    expected_pd: "{{ pipeline | vllm_omni.serve.expected_pd(vllm_omni_plan) }}"
"""

RETURN = r"""
_value:
  description: One dict per stage.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._inventory import plain
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime import _expect


def _pipeline(value):
    if not isinstance(value, dict) or "stages" not in value:
        raise AnsibleFilterError("expects one pipeline of the plan (vllm_omni_plan.hosts[host].pipelines[i])")
    return plain(value)


def expected_stages(pipeline):
    return _expect.expected_stages(_pipeline(pipeline))


class FilterModule:
    def filters(self):
        return {"expected_stages": expected_stages}
