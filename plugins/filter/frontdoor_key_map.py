# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: frontdoor_key_map
short_description: The front door's API key map (nginx), matching each accepted key case-sensitively
version_added: 0.1.0
description:
  - The text of the front door's key map file (C(vllm_omni_plan.router.frontdoor.api_keys)), which nginx includes in
    a C(map $http_authorization $vllm_omni_upstream_authorization) block, one entry per key a client may send, each
    giving the C(Authorization) header nginx sends on to the engines (C(Bearer <upstream>)); a request matching no
    entry is refused with 401.
  - nginx matches plain map strings ignoring case, so each entry is a case-sensitive regular expression anchored at
    both ends, every character other than a letter or digit in a character class of its own.
  - Every key must already have passed the collection's secrets check (an HTTP bearer token); anything else is refused.
  - Use it only in a task with C(no_log), the text holds the keys.
options:
  _input:
    description: The keys clients may send (C(vllm_omni_api_keys)), or one key (C(vllm_omni_api_key)).
    type: raw
    required: true
  upstream:
    description: The key the engines check (C(vllm_omni_api_key)), sent on in place of the client's. Default, for one
      key, that key.
    type: str
"""

EXAMPLES = r"""
- name: Front door | the API keys nginx accepts, and the one it sends on
  ansible.builtin.copy:
    content: "{{ (vllm_omni_api_keys or [vllm_omni_api_key]) | vllm_omni.serve.frontdoor_key_map(vllm_omni_api_key) }}"
    dest: /etc/nginx/vllm-omni/api-keys.map
    mode: "0640"
  no_log: true
"""

RETURN = r"""
_value:
  description: The map file's text (one entry and a newline per key).
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts import _host_files


def frontdoor_key_map(keys, upstream=None):
    keys = [str(keys)] if isinstance(keys, str) else [str(key) for key in keys or []]
    try:
        return _host_files.frontdoor_key_map(keys, None if upstream is None else str(upstream))
    except ValueError as error:
        raise AnsibleFilterError(str(error)) from None


class FilterModule:
    def filters(self):
        return {"frontdoor_key_map": frontdoor_key_map}
