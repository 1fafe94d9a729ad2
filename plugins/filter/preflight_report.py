# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: preflight_report
short_description: Judge one host's preflight facts against the plan
version_added: 0.1.0
description:
  - Checks systemd, Python, the NVIDIA driver and GPUs, free disk for venvs and the model cache, every
    planned port, the locked-memory limit, RDMA devices (protocol rdma) and clock synchronisation.
  - Returns C(host), C(status) (C(ok), C(warn), C(fail)) and C(checks), each with C(check), C(status),
    C(detail) and, when not ok, C(fix).
options:
  facts:
    description: The host's M(vllm_omni.serve.preflight_facts) result.
    type: dict
    required: true
  gpu_facts:
    description: The host's C(vllm_omni_gpu_facts), or null.
    type: dict
extends_documentation_fragment:
  - vllm_omni.serve.plan_input.host
seealso:
  - module: vllm_omni.serve.preflight_facts
  - plugin: vllm_omni.serve.preflight_summary
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Preflight | judge
  ansible.builtin.set_fact:
    vllm_omni_preflight_report: >-
      {{ vllm_omni_plan | vllm_omni.serve.preflight_report(inventory_hostname, preflight, vllm_omni_gpu_facts | default(none)) }}
"""

RETURN = r"""
_value:
  description: The report.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._inventory import plain
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime import _preflight


def preflight_report(plan, host, facts, gpu_facts=None):
    if not isinstance(plan, dict) or "hosts" not in plan or not isinstance(facts, dict):
        raise AnsibleFilterError("preflight_report: plan | vllm_omni.serve.preflight_report(host, facts, gpu_facts)")
    return _preflight.evaluate(plain(plan), str(host), plain(facts), plain(gpu_facts) if gpu_facts else None)


class FilterModule:
    def filters(self):
        return {"preflight_report": preflight_report}
