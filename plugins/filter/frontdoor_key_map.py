# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: frontdoor_key_map
short_description: The front door's API key map entry (nginx), matching the key case-sensitively
version_added: 0.1.0
description:
  - The text of the front door's key map file (C(vllm_omni_plan.router.frontdoor.api_keys)), which nginx includes in
    a C(map $http_authorization) block. nginx matches plain map strings ignoring case, so the entry is a
    case-sensitive regular expression anchored at both ends, every character other than a letter or digit in a
    character class of its own.
  - The key must already have passed the collection's secrets check (an HTTP bearer token); anything else is refused.
  - Use it only in a task with C(no_log), the text holds the key.
options:
  _input:
    description: The API key.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Front door | the API key nginx checks
  ansible.builtin.copy:
    content: "{{ vllm_omni_api_key | vllm_omni.serve.frontdoor_key_map }}"
    dest: /etc/nginx/vllm-omni/api-keys.map
    mode: "0640"
  no_log: true
"""

RETURN = r"""
_value:
  description: The map file's text (one entry and a newline).
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.plugin_utils import _host_files


def frontdoor_key_map(key):
    try:
        return _host_files.frontdoor_key_map(str(key))
    except ValueError as error:
        raise AnsibleFilterError(str(error)) from None


class FilterModule:
    def filters(self):
        return {"frontdoor_key_map": frontdoor_key_map}
