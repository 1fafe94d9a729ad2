# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts import _rsyncd

DOCUMENTATION = r"""
name: artifacts_controller_rsyncd
short_description: The controller's rsync daemon configuration, which sends each artifact's first copy
version_added: 0.1.0
description:
  - One read-only module per artifact of the plan (C(vllm_omni_plan.artifacts.items)), served from its controller
    copy, open to the deployment's hosts only (the first host of each tree pulls from it, and any host whose parent
    failed). Not chrooted, so a model directory whose files are symlinks into a Hugging Face cache is sent as files.
  - Each transfer is logged with the bytes sent (the controller's egress, docs/benchmarks.md).
options:
  sources:
    description: Artifact id -> its directory on the controller.
    type: dict
    required: true
  log_file:
    description: The daemon's log (every transfer with its bytes).
    type: str
    required: true
extends_documentation_fragment:
  - vllm_omni.serve.plan_input
"""

EXAMPLES = r"""
- name: Artifacts | the controller's daemon configuration
  ansible.builtin.copy:
    content: >-
      {{ vllm_omni_plan | vllm_omni.serve.artifacts_controller_rsyncd(
           artifacts_sources, [artifacts_controller_cache, vllm_omni_plan.artifacts.controller.daemon_log]
                              | ansible.builtin.path_join) }}
    dest: "{{ [artifacts_controller_cache, vllm_omni_plan.artifacts.controller.daemon_config] | ansible.builtin.path_join }}"
    mode: "0644"
"""

RETURN = r"""
_value:
  description: The rsyncd.conf text.
  type: str
"""

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._inventory import plain


def artifacts_controller_rsyncd(plan, sources, log_file):
    return _rsyncd.controller_rsyncd_text(plain(plan), plain(sources), str(log_file))


class FilterModule:
    def filters(self):
        return {"artifacts_controller_rsyncd": artifacts_controller_rsyncd}
