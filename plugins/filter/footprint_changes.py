# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: footprint_changes
short_description: What to take away from a host, comparing its footprint record with the plan
version_added: 0.1.0
description:
  - C(prune) (default) lists what the host's record (written by the last deploy) has and the plan's footprint for the
    host does not (units, files, directories deepest first, venvs and service accounts). The model cache is never
    listed.
  - C(everything) lists the union of the record and the plan's footprint, for uninstall; kept directories (the model
    cache) only with O(purge).
options:
  _input:
    description: The host's footprint record (the parsed C(paths.footprint_record) file), or null when there is none.
    type: raw
    required: true
  current:
    description: The plan's footprint of the host (C(vllm_omni_plan.footprint[host])), or null when the host has no part
      in the plan.
    type: raw
    required: true
  mode:
    description: C(prune) or C(everything).
    type: str
    default: prune
  components:
    description: For C(prune), only these components (e.g. C([engine]) while the engine role prunes pipelines).
    type: list
    elements: str
  purge:
    description: For C(everything), also the kept directories.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Stale pipelines
  ansible.builtin.set_fact:
    stale: >-
      {{ recorded | vllm_omni.serve.footprint_changes(vllm_omni_plan.footprint[inventory_hostname],
                                                      components=['engine']) }}
"""

RETURN = r"""
_value:
  description: C(units), C(files), C(directories), C(venvs), C(accounts) (and C(kept) for C(everything)).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host import _footprint
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._inventory import plain


def footprint_changes(recorded, current, mode="prune", components=None, purge=False):
    if mode not in ("prune", "everything"):
        raise AnsibleFilterError(f"footprint_changes: mode is {mode!r}, not prune or everything")
    for name, value in (("record", recorded), ("current", current)):
        if value is not None and not (isinstance(value, dict) and "units" in value and "files" in value):
            raise AnsibleFilterError(f"footprint_changes: the {name} footprint is not a footprint (units, files, ...)")
    recorded, current = plain(recorded), plain(current)
    if mode == "everything":
        return _footprint.everything(recorded, current, bool(purge))
    return _footprint.stale(recorded, current, [str(c) for c in components] if components is not None else None)


class FilterModule:
    def filters(self):
        return {"footprint_changes": footprint_changes}
