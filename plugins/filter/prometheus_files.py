# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: prometheus_files
short_description: Prometheus file_sd targets and scrape jobs for a deployment plan
version_added: 0.1.0
description:
  - One file_sd target group per engine pipeline (labels C(host), C(pipeline), C(gpus), C(gpu_count), C(backend),
    C(layout)), per router (its metrics port) and per Mooncake master, and C(scrape-configs.yml) with one job each
    (C(vllm-omni-engine), C(vllm-omni-router), C(mooncake-master)) reading those files.
  - The same files C(render.yml) writes under C(prometheus/) and the monitoring role installs.
options:
  _input:
    description: The plan.
    type: dict
    required: true
  targets_dir:
    description: Where the target files live on the Prometheus host.
    type: str
    default: /etc/prometheus/vllm-omni
"""

EXAMPLES = r"""
- name: Monitoring | target files
  ansible.builtin.copy:
    content: "{{ item.value }}"
    dest: "/etc/prometheus/vllm-omni/{{ item.key | basename }}"
    mode: "0644"
  loop: "{{ vllm_omni_plan | vllm_omni.serve.prometheus_files | dict2items }}"
"""

RETURN = r"""
_value:
  description: Relative path to file text (C(targets/engines.json), C(targets/routers.json), ..., C(scrape-configs.yml)).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.plugin_utils._inventory import plain
from ansible_collections.vllm_omni.serve.plugins.plugin_utils._observability import prometheus_files as _files


def prometheus_files(plan, targets_dir="/etc/prometheus/vllm-omni"):
    if not isinstance(plan, dict) or "hosts" not in plan:
        raise AnsibleFilterError("prometheus_files expects the plan as input")
    return _files(plain(plan), str(targets_dir))


class FilterModule:
    def filters(self):
        return {"prometheus_files": prometheus_files}
