# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: status_table
short_description: A status document as a table
version_added: 0.1.0
description:
- One line per pipeline (host, pipeline, unit state, health, GPUs, API port, router membership), one per router, then OK
  or NOT OK.
options:
  _input:
    description: A document from P(vllm_omni.serve.status_document#filter).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Status | table
  ansible.builtin.debug:
    msg: "{{ status | vllm_omni.serve.status_table }}"
"""

RETURN = r"""
_value:
  description: Table lines.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._inventory import plain
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime import _status


def status_table(document):
    if not isinstance(document, dict) or "pipelines" not in document:
        raise AnsibleFilterError("status_table expects a status_document")
    return _status.status_table(plain(document))


class FilterModule:
    def filters(self):
        return {"status_table": status_table}
