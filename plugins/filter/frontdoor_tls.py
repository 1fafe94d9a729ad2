# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: frontdoor_tls
short_description: Where the collection keeps the front door's generated TLS material on the controller
version_added: 0.1.0
description:
  - For a router host of the plan, the controller paths of the collection's CA (C(ca.pem), C(ca.key)) and of that
    host's certificate and key (named after the host and its address). The directory is C($VLLM_OMNI_CACHE/tls)
    (default C(~/.cache/vllm-omni-serve/tls)).
options:
  host:
    description: Inventory name of the router host.
    type: str
    required: true
extends_documentation_fragment:
  - vllm_omni.serve.plan_input
"""

EXAMPLES = r"""
- name: Front door | controller paths
  ansible.builtin.set_fact:
    frontdoor_tls_paths: "{{ vllm_omni_plan | vllm_omni.serve.frontdoor_tls(inventory_hostname) }}"
"""

RETURN = r"""
_value:
  description: C(dir), C(ca), C(ca_key), C(certificate), C(key), C(ip).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host import _names


def frontdoor_tls(plan, host):
    host = str(host)
    try:
        ip = str(plan["router"]["per_host"][host]["ip"])
    except (KeyError, TypeError):
        raise AnsibleFilterError(f"frontdoor_tls: {host} is not a router host of the plan") from None
    directory = _names.tls_dir()
    stem = _names.tls_stem(host, ip)
    return {"dir": str(directory), "ca": str(directory / "ca.pem"), "ca_key": str(directory / "ca.key"),
            "certificate": str(directory / f"{stem}.pem"), "key": str(directory / f"{stem}.key"), "ip": ip}


class FilterModule:
    def filters(self):
        return {"frontdoor_tls": frontdoor_tls}
