# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: without_worker_urls
short_description: A vllm-router command line without its worker list
version_added: 0.1.0
description:
  - Drops the C(--worker-urls) value list, so a change of membership alone (applied live through the router's
    API) can be told apart from a change that needs a restart.
options:
  _input:
    description: The router argv from the plan.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Router | shape
  ansible.builtin.debug:
    msg: "{{ vllm_omni_plan.router.per_host[inventory_hostname].argv | vllm_omni.serve.without_worker_urls }}"
"""

RETURN = r"""
_value:
  description: The argv without the values of C(--worker-urls).
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError


def without_worker_urls(argv):
    if not isinstance(argv, list):
        raise AnsibleFilterError("without_worker_urls expects the router argv (a list)")
    shape, skipping = [], False
    for word in argv:
        if word == "--worker-urls":
            shape.append(word)
            skipping = True
            continue
        if skipping and not str(word).startswith("--"):
            continue
        skipping = False
        shape.append(word)
    return shape


class FilterModule:
    def filters(self):
        return {"without_worker_urls": without_worker_urls}
