# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: firewall_peers
short_description: The nftables peer set of a deployment plan, the same file on every host
version_added: 0.1.0
description:
  - Text of the plan's C(firewall.peers_file), one set C(inventory_peers_v4) in table C(inet vllm_omni) holding every
    inventory host's address (the plan's C(firewall.peers)). Every host's ruleset (P(vllm_omni.serve.firewall_ruleset#filter))
    includes it, so the peer list is written once per deployment instead of once per host.
  - A complete ruleset on its own, so C(nft -c -f) checks it; it is loaded through the host's ruleset, which replaces
    the table and this set in one transaction. C(render.yml) writes the same text to C(firewall/peers.nft).
options:
  _input:
    description: The plan.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Firewall | peer set (before the ruleset that includes it)
  ansible.builtin.copy:
    content: "{{ vllm_omni_plan | vllm_omni.serve.firewall_peers }}"
    dest: "{{ vllm_omni_plan.firewall.peers_file }}"
    mode: "0644"
    validate: nft -c -f %s
"""

RETURN = r"""
_value:
  description: The nftables file text.
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.plugin_utils._firewall import peers_text
from ansible_collections.vllm_omni.serve.plugins.plugin_utils._inventory import plain


def firewall_peers(plan):
    if not isinstance(plan, dict) or "firewall" not in plan:
        raise AnsibleFilterError("firewall_peers expects the plan (with its firewall section) as input")
    firewall = plan["firewall"]
    if not firewall.get("enabled"):
        raise AnsibleFilterError("the plan's firewall is disabled (vllm_omni_firewall_enabled: false)")
    # Only the firewall section, less the per-host rules, is converted.
    return peers_text({"firewall": {key: plain(value) for key, value in firewall.items() if key != "per_host"}})


class FilterModule:
    def filters(self):
        return {"firewall_peers": firewall_peers}
