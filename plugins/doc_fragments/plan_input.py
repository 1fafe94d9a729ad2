# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """The input of the filters that read the plan; a filter's own entry for an option wins."""

    # vllm_omni.serve.plan_input: a filter of the whole plan.
    DOCUMENTATION = r"""
options:
  _input:
    description: The plan.
    type: dict
    required: true
"""

    # vllm_omni.serve.plan_input.host: a filter of the plan for one of its hosts.
    HOST = r"""
options:
  _input:
    description: The plan.
    type: dict
    required: true
  host:
    description: Inventory name of the host.
    type: str
    required: true
"""

    # vllm_omni.serve.plan_input.pipeline: a filter of one pipeline of the plan.
    PIPELINE = r"""
options:
  _input:
    description: One pipeline of the plan (C(vllm_omni_plan.hosts[host].pipelines[i])).
    type: dict
    required: true
"""
