# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: pd_handoff
short_description: Whether one request went prefill -> KV transfer -> decode, judged from a pipeline's log
version_added: 0.1.0
description:
  - Reads the lines the collection's KV connector logs in a prefill/decode pipeline (the prefill stage handing a
    request's KV off, the decode stage receiving it) for the request sent with O(request_id), and the engine's own
    failure lines (C(Missing prefill kv_transfer_params.remote_request_id), C(EngineDeadError)).
  - Returns C(ok) only when both hand-off lines are there and no failure line is.
deprecated:
  removed_in: 1.0.0
  why: P(vllm_omni.serve.pd_verdicts#filter) judges every pipeline of a host in one call, and the journals of a
    distributed pipeline's processes together; the collection's PD check uses it.
  alternative: P(vllm_omni.serve.pd_verdicts#filter)
options:
  _input:
    description: Log text of the pipeline since the request was sent (e.g. C(journalctl -u UNIT --since @T -o cat)).
    type: str
    required: true
  request_id:
    description: The C(request_id) the chat completion was sent with (8-101 letters, digits, C(.), C(_), C(-)).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: The smoke request went through prefill and decode
  ansible.builtin.assert:
    that: (journal.stdout | vllm_omni.serve.pd_handoff(smoke_request_id)).ok
"""

RETURN = r"""
_value:
  description: C(ok), the matching C(prefill) and C(decode) lines, C(failures) and a one-line C(reason).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime import _pd_evidence


def pd_handoff(log_text, request_id):
    # Said where the filter is used, not through meta/runtime.yml: Ansible loads every filter file of a collection
    # when a template uses any of its filters, and a routing deprecation then warned on every render and deploy.
    Display().deprecated("vllm_omni.serve.pd_handoff is superseded: use vllm_omni.serve.pd_verdicts, which judges "
                         "every pipeline of a host (and a distributed pipeline's processes together) in one call",
                         version="1.0.0", collection_name="vllm_omni.serve")
    try:
        return _pd_evidence.judge(str(log_text), request_id)
    except ValueError as error:
        raise AnsibleFilterError(str(error)) from None


class FilterModule:
    def filters(self):
        return {"pd_handoff": pd_handoff}
