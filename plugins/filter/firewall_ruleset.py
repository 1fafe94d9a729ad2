# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: firewall_ruleset
short_description: The nftables ruleset one host of a deployment plan loads
version_added: 0.1.0
description:
  - Text of the host's ruleset file (the plan's C(firewall.ruleset_file)), one table C(inet vllm_omni) whose input
    chain lets loopback, the inventory's hosts and, on the router and Prometheus ports, the configured client networks
    reach the ports the plan listens on, and drops everything else to those ports. Other ports are not filtered.
  - The inventory's hosts are the set C(inventory_peers_v4), which the file includes from the plan's
    C(firewall.peers_file) (see P(vllm_omni.serve.firewall_peers#filter)); that file must be in place before this one is
    checked (C(nft -c -f)) or loaded. The text holds only this host's rules, whatever the size of the inventory.
  - The file replaces the table atomically when loaded with C(nft -f), the included peer set in the same transaction;
    C(render.yml) writes the same text to C(<host>/firewall.nft).
options:
  _input:
    description: The plan.
    type: dict
    required: true
  host:
    description: Inventory name of the host.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Firewall | ruleset
  ansible.builtin.copy:
    content: "{{ vllm_omni_plan | vllm_omni.serve.firewall_ruleset(inventory_hostname) }}"
    dest: "{{ vllm_omni_plan.firewall.ruleset_file }}"
    mode: "0644"
    validate: nft -c -f %s
"""

RETURN = r"""
_value:
  description: The nftables file text.
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.plugin_utils._firewall import ruleset_text
from ansible_collections.vllm_omni.serve.plugins.plugin_utils._inventory import plain


def firewall_ruleset(plan, host):
    if not isinstance(plan, dict) or "firewall" not in plan:
        raise AnsibleFilterError("firewall_ruleset expects the plan (with its firewall section) as input")
    firewall = plan["firewall"]
    if not firewall.get("enabled"):
        raise AnsibleFilterError("the plan's firewall is disabled (vllm_omni_firewall_enabled: false)")
    host = str(host)
    # Only this host's part is converted: the whole plan (every host, every peer) per host is quadratic.
    section = {key: plain(value) for key, value in firewall.items() if key not in ("peers", "per_host")}
    section["per_host"] = {host: plain(firewall["per_host"][host])} if host in firewall["per_host"] else {}
    return ruleset_text({"firewall": section}, host)


class FilterModule:
    def filters(self):
        return {"firewall_ruleset": firewall_ruleset}
