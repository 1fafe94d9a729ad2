# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: systemd_hardening
short_description: The plan's sandboxing directives for one unit, as systemd [Service] lines
version_added: 0.1.0
description:
  - Formats one list of the plan's C(hardening) section (C(engine), C(router) or C(mooncake_master)) as
    C(Directive=value) lines. A directive relaxed for the real engine carries a comment with the reason; one
    left out appears as a comment only, so C(systemctl cat) shows what is missing and why.
options:
  _input:
    description: A list from the plan, e.g. C(vllm_omni_plan.hardening.router).
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Show the router's sandbox
  ansible.builtin.debug:
    msg: "{{ vllm_omni_plan.hardening.router | vllm_omni.serve.systemd_hardening }}"
"""

RETURN = r"""
_value:
  description: The lines, joined with newlines.
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.plugin_utils._inventory import plain
from ansible_collections.vllm_omni.serve.plugins.plugin_utils._render import directives_text


def systemd_hardening(entries):
    if not isinstance(entries, list) or not all(isinstance(e, dict) and "directive" in e for e in entries):
        raise AnsibleFilterError("systemd_hardening expects a list from the plan's hardening section")
    return directives_text(plain(entries))


class FilterModule:
    def filters(self):
        return {"systemd_hardening": systemd_hardening}
