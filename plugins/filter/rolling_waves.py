# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: rolling_waves
short_description: Split serving pipelines that change into waves, a bounded number down at a time
version_added: 0.1.0
description:
  - Deploy and upgrade restart pipelines that already serve in waves (roles/upgrade). Each wave's pipelines leave the
    routers, restart, are checked and come back before the next wave starts.
  - A wave holds at most the bound, C(max_unavailable) (a count or a share such as C(25%) of the serving pipelines,
    rounded down, at least 1), and never every serving pipeline. Pipelines are taken round-robin over the hosts.
options:
  _input:
    description: Host -> the names of its serving pipelines that change, in the host's order.
    type: dict
    required: true
  serving:
    description: How many pipelines serve now (across the play's hosts).
    type: int
    required: true
  max_unavailable:
    description: The plan's C(rolling.max_unavailable).
    type: raw
    required: true
  whole_hosts:
    description: One wave per host with all of its changed pipelines (the bound does not apply).
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Roll | the waves
  ansible.builtin.set_fact:
    roll: "{{ {'lab-1': ['omni0', 'omni1'], 'lab-2': ['omni0']} | vllm_omni.serve.rolling_waves(3, 1) }}"
  # roll.waves == [{'lab-1': ['omni0']}, {'lab-2': ['omni0']}, {'lab-1': ['omni1']}]
"""

RETURN = r"""
_value:
  description: C(waves) (a list of host to names), C(bound), C(pipelines) (how many restart) and C(notes).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime import _rolling


def rolling_waves(changed, serving, max_unavailable, whole_hosts=False):
    try:
        return _rolling.waves({str(host): [str(name) for name in names] for host, names in dict(changed).items()},
                              int(serving), max_unavailable, bool(whole_hosts))
    except (TypeError, ValueError) as error:
        raise AnsibleFilterError(f"rolling_waves: {error}") from None


class FilterModule:
    def filters(self):
        return {"rolling_waves": rolling_waves}
