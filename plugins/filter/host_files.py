# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: host_files
short_description: The texts of the files a deployment plan installs on one host
version_added: 0.1.0
description:
  - For every file the plan's footprint lists for the host (C(vllm_omni_plan.footprint[host].files)), its text,
    keyed by the file's C(render) key. That covers units, drop-ins, stage configs, environment files (without the
    host-only secrets), kernel settings, firewall files, the router's restart marker and Prometheus' files.
  - C(render.yml) writes exactly these texts, so the render directory is what lands on the hosts.
options:
  components:
    description: Only the files of these footprint components (C(engine), C(router), C(mooncake), C(mooncake_master),
      C(firewall), C(monitoring)); all when omitted.
    type: list
    elements: str
extends_documentation_fragment:
  - vllm_omni.serve.plan_input.host
"""

EXAMPLES = r"""
- name: Router | its files, computed once
  ansible.builtin.set_fact:
    router_texts: "{{ vllm_omni_plan | vllm_omni.serve.host_files(inventory_hostname, ['router']) }}"
"""

RETURN = r"""
_value:
  description: Render key -> file text.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._inventory import plain
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts import _render


def host_files(plan, host, components=None):
    if not isinstance(plan, dict) or "footprint" not in plan:
        raise AnsibleFilterError("host_files expects the plan (with its footprint section) as input")
    host = str(host)
    if host not in plan["footprint"]:
        return {}
    return _render.host_files(_render.host_slice(plan, host, plain), host,
                              [str(c) for c in components] if components is not None else None)


class FilterModule:
    def filters(self):
        return {"host_files": host_files}
