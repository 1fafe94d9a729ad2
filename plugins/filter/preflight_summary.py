# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: preflight_summary
short_description: A table of preflight reports
version_added: 0.1.0
description:
- One line per host (status and counts), then one line per warning or failure with its fix.
options:
  _input:
    description: Reports from P(vllm_omni.serve.preflight_report#filter).
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Preflight | summary
  ansible.builtin.debug:
    msg: "{{ reports | vllm_omni.serve.preflight_summary }}"
"""

RETURN = r"""
_value:
  description: Table lines.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._inventory import plain
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime import _preflight


def preflight_summary(reports):
    if not isinstance(reports, list):
        raise AnsibleFilterError("preflight_summary expects a list of preflight reports")
    return _preflight.summary_table(plain(reports))


class FilterModule:
    def filters(self):
        return {"preflight_summary": preflight_summary}
