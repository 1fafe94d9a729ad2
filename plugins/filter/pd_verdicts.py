# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: pd_verdicts
short_description: For several pipelines at once, whether each one's request went prefill -> KV transfer -> decode
version_added: 0.1.0
description:
  - The judgement of P(vllm_omni.serve.pd_handoff#filter) for each pipeline, from the journal text of all its
    processes (a distributed pipeline's prefill and decode engines log on their own hosts).
  - A pipeline without journal text gets a verdict that is not C(ok).
options:
  _input:
    description: Pipeline key -> the journal text of its processes since the request was sent.
    type: dict
    required: true
  request_ids:
    description: Pipeline key -> the C(request_id) its chat completion was sent with.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Every pipeline's request went through prefill and decode
  ansible.builtin.assert:
    that: (journals | vllm_omni.serve.pd_verdicts(ids)).values() | rejectattr('ok') | list | length == 0
"""

RETURN = r"""
_value:
  description: Pipeline key -> C(ok), the matching C(prefill) and C(decode) lines, C(failures) and a C(reason).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime import _pd_evidence


def pd_verdicts(journals, request_ids):
    if not isinstance(journals, dict) or not isinstance(request_ids, dict):
        raise AnsibleFilterError("pd_verdicts expects {pipeline key: journal text} and {pipeline key: request id}")
    try:
        return {str(key): _pd_evidence.judge(str(journals.get(key) or ""), str(request_id))
                for key, request_id in request_ids.items()}
    except ValueError as error:
        raise AnsibleFilterError(str(error)) from None


class FilterModule:
    def filters(self):
        return {"pd_verdicts": pd_verdicts}
