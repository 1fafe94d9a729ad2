# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: systemd_exec
short_description: An argv list as one systemd ExecStart= command line
version_added: 0.1.0
description:
  - Joins the words with spaces, quoting a word (and escaping C(%), C($), C(\) and C(")) only when systemd
    would otherwise split or expand it. The same quoting the pipelines' drop-ins use.
options:
  _input:
    description: The argv, e.g. C(vllm_omni_plan.router.per_host[inventory_hostname].argv).
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: A unit line
  ansible.builtin.debug:
    msg: "ExecStart={{ ['/usr/bin/echo', 'a b', '100%'] | vllm_omni.serve.systemd_exec }}"
"""

RETURN = r"""
_value:
  description: The command line.
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.plugin_utils._render import systemd_word


def systemd_exec(argv):
    if not isinstance(argv, list) or not argv or not all(isinstance(word, str) for word in argv):
        raise AnsibleFilterError(f"systemd_exec expects a non-empty list of strings, got {argv!r}")
    return " ".join(systemd_word(str(word)) for word in argv)


class FilterModule:
    def filters(self):
        return {"systemd_exec": systemd_exec}
