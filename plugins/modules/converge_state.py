#!/usr/bin/python
# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: converge_state
short_description: Say whether a host is exactly as the last whole deploy left it (the no-op check), or record that
version_added: 0.1.0
description:
  - With I(state=present), at the end of a whole deploy that succeeded on the host, records at I(path) the
    digest of what the controller deployed from and a snapshot of what the deploy left there. The snapshot
    holds every planned file's SHA-256, owner and mode, every planned directory, each unit's enablement and
    whether it is up, each venv's missing package files, each artifact tree's entry count, size and newest
    change, the live values of the kernel settings the deploy sets, and the firewall table without its
    counters. Only root can read the record (mode 0600).
  - With I(state=check), reads the record and takes the same snapshot again in this one call. The host is in
    sync when the digests are equal, the snapshot is equal, and every health URL answers 200. Otherwise it
    returns the reasons, one line per difference, such as a file whose hash changed or a unit that is down.
    It changes nothing.
  - With I(state=absent), removes the record, so that the next deploy runs every play.
  - The action on the controller mixes the host's operator variables into I(digest) (their names from the
    collection's prefixes; computed facts and one-run switches left out). A new secret or override is then
    a reason to run.
options:
  state:
    description: C(check) compares, C(present) records, C(absent) removes the record.
    type: str
    required: true
    choices: [check, present, absent]
  path:
    description: The record on the host (the plan's C(paths.converge_record)).
    type: str
    required: true
  look:
    description:
      - What to look at on this host, built from the plan by the C(vllm_omni.serve.converge_look) filter. It can
        hold C(files), C(directories), C(units), C(venvs), C(trees) and C(health) (each a list), C(sysctl) (a
        file of kernel settings) and C(firewall) (an nftables C(family table)).
    type: dict
    default: {}
  digest:
    description: The controller's digest of the plan, code and TLS material (C(vllm_omni.serve.converge_digest)).
    type: str
    default: ""
  taken:
    description:
      - With I(state=check), the look M(vllm_omni.serve.host_facts) took on this host earlier in the same run (its
        C(converge_taken)). The action then judges it on the controller (the same reasons in the same order) and
        the host is not reached a second time. Without it, the module takes its own look.
    type: dict
attributes:
  check_mode:
    support: full
    description: C(check) runs as is; C(present) and C(absent) change nothing in check mode.
  action:
    support: full
    description: The action adds the host's operator variables to I(digest), and judges I(taken) without reaching the
      host.
extends_documentation_fragment:
  - vllm_omni.serve.attributes
author:
  - vllm_omni.serve contributors (@vllm-omni-serve)
"""

EXAMPLES = r"""
- name: Converge | this host against what the last whole deploy left
  vllm_omni.serve.converge_state:
    state: check
    path: "{{ vllm_omni_plan.paths.converge_record }}"
    look: "{{ vllm_omni_plan | vllm_omni.serve.converge_look(inventory_hostname) }}"
    digest: "{{ hostvars['localhost'].converge_fleet_digest }}"
    taken: "{{ facts_host.converge_taken | default(omit) }}"  # host_facts' look, this run: no second call
  register: converge
"""

RETURN = r"""
in_sync:
  description: With I(state=check), whether there is nothing to do on this host.
  returned: always
  type: bool
reasons:
  description: With I(state=check), what differs (at most 8 lines, then a count).
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vllm_omni.serve.plugins.module_utils._action_options import CONVERGE_STATE
from ansible_collections.vllm_omni.serve.plugins.module_utils._converge import (
    read_record,
    remove_record,
    snapshot,
    verdict,
    write_record,
)


def main():
    module = AnsibleModule(argument_spec=CONVERGE_STATE, supports_check_mode=True)
    state, path, look, digest = (module.params[name] for name in ("state", "path", "look", "digest"))
    # (taken is judged by the action on the controller and never reaches here.)
    if state == "check":
        module.exit_json(changed=False, **verdict(read_record(path), digest, look))
    if state == "absent":
        changed = os.path.lexists(path)
        if changed and not module.check_mode:
            remove_record(path)
        module.exit_json(changed=changed, in_sync=False, reasons=[])
    taken = snapshot(look)
    recorded = read_record(path) or {}
    changed = (recorded.get("digest"), recorded.get("look"), recorded.get("snapshot")) != (digest, look, taken)
    if changed and not module.check_mode:
        try:
            write_record(path, digest, look, taken)
        except OSError as error:
            module.fail_json(msg=f"could not write the converge record {path}: {error}")
    module.exit_json(changed=changed, in_sync=True, reasons=[])


if __name__ == "__main__":
    main()
