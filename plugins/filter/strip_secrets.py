# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: strip_secrets
short_description: An engine.env without its host-only secrets block
version_added: 0.1.0
description:
- Cuts an installed C(engine.env) at the secrets marker the engine role writes, leaving exactly the rendered part, so it
  can be compared with the render. Other texts pass unchanged. Takes a text or a list of texts.
options:
  _input:
    description: File text(s).
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: Compare an installed env file with the render
  ansible.builtin.assert:
    that: installed_env | vllm_omni.serve.strip_secrets == rendered_env
"""

RETURN = r"""
_value:
  description: The text(s) without the secrets block.
  type: raw
"""

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime import _upgrade


def strip_secrets(texts):
    if isinstance(texts, str):
        return _upgrade.strip_secrets(texts)
    return [_upgrade.strip_secrets(str(text)) for text in texts]


class FilterModule:
    def filters(self):
        return {"strip_secrets": strip_secrets}
