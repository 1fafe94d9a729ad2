# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: install_set
short_description: The directories and rendered files of a host's footprint, as the plan_files module takes them
version_added: 0.1.0
description:
  - For the footprint components given, the host's directories (C(path), C(owner), C(group), C(mode)) and its
    rendered files with their texts (C(content)), in the footprint's order. Files without a render entry (secrets,
    TLS material made on the controller) are not included; the roles that make them write them.
  - The texts are those of P(vllm_omni.serve.host_files#filter), so what lands is what C(render.yml) writes.
options:
  components:
    description: Footprint components (C(engine), C(router), C(frontdoor), C(firewall), C(mooncake), C(monitoring),
      C(artifacts), C(mooncake_master)).
    type: list
    elements: str
    required: true
  validate:
    description: File name suffix -> command that checks a candidate (C(%s) is the candidate's path).
    type: dict
  paths:
    description: Only the files with these paths (for example one pipeline's files); directories are all listed.
    type: list
    elements: str
extends_documentation_fragment:
  - vllm_omni.serve.plan_input.host
"""

EXAMPLES = r"""
- name: Router | directories, unit and restart marker
  vllm_omni.serve.plan_files:
    directories: "{{ router_install.directories }}"
    files: "{{ router_install.files }}"
  vars:
    router_install: "{{ vllm_omni_plan | vllm_omni.serve.install_set(inventory_hostname, ['router']) }}"
"""

RETURN = r"""
_value:
  description: C(directories) and C(files), lists of dicts.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._inventory import plain
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts import _render


def install_set(plan, host, components, validate=None, paths=None):
    if not isinstance(plan, dict) or "footprint" not in plan:
        raise AnsibleFilterError("install_set expects the plan (with its footprint section) as input")
    host = str(host)
    return _render.install_set(_render.host_slice(plan, host, plain), host, [str(c) for c in components],
                               {str(k): str(v) for k, v in (validate or {}).items()},
                               [str(p) for p in paths] if paths is not None else None)


class FilterModule:
    def filters(self):
        return {"install_set": install_set}
