#!/usr/bin/python
# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: health_wait
short_description: Wait until each service answers its health URL with 200, saying from its journal what it is doing
version_added: 0.1.0
description:
  - Asks each target's health URL on the host until every one answers 200 or I(timeout) seconds pass.
  - While it waits it prints, every I(progress_interval) seconds, one line per target that is not healthy yet.
    The line says how long it has waited, what the URL answered, and what the unit's journal says the engine is
    doing, read from vLLM's start-up milestones (loading weights with its percentage, compiling, allocating the KV
    cache, capturing CUDA graphs, starting the API server), followed by the journal's newest line.
  - When the time is up it fails with one message per target that did not answer, naming the host, the target,
    its unit and URL, and the unit's last I(journal_lines) journal lines.
  - With I(stall_timeout), a target whose start makes no progress for that long fails the wait at once, naming the
    phase it is stuck in (and its stage), instead of waiting out I(timeout). Progress is a new start-up milestone
    or percentage in its journal, or before the first milestone a new newest line; a restart of its unit counts.
  - Runs as an action on the controller that repeats one look on the host (this module), 1 s apart
    at first, slowing to every I(delay) seconds as the wait grows (a restart up in two seconds is seen then).
options:
  targets:
    description:
      - Services to wait for, each with C(name), C(unit) (its systemd unit) and C(health_url) (the whole URL
        that answers 200 when it serves, as the plan spells it); other keys are ignored, so the plan's pipelines
        can be passed as they are.
    type: list
    elements: dict
    required: true
  timeout:
    description: Seconds to wait in all.
    type: int
    default: 1800
  delay:
    description: Longest pause between looks, in seconds.
    type: int
    default: 5
  journal_lines:
    description: Journal lines in the failure message (progress reads the newest 20).
    type: int
    default: 40
  request_timeout:
    description: Seconds one request may take.
    type: int
    default: 5
  stall_timeout:
    description: Seconds a target may go without progress before the wait fails naming its phase; 0 waits for
      I(timeout) only.
    type: int
    default: 0
attributes:
  action:
    support: full
    description: The waiting, progress and failure message are the action's; the module takes one look.
extends_documentation_fragment:
  - vllm_omni.serve.attributes.read_only
  - vllm_omni.serve.progress
author:
  - vllm_omni.serve contributors (@vllm-omni-serve)
"""

EXAMPLES = r"""
- name: Health | every pipeline answers its health URL
  vllm_omni.serve.health_wait:
    targets: "{{ vllm_omni_plan.hosts[inventory_hostname].pipelines | selectattr('health_url') | list }}"
    timeout: 1800

- name: Health | the router is ready
  vllm_omni.serve.health_wait:
    targets:
      - name: router
        unit: "{{ vllm_omni_plan.router.unit }}"
        health_url: "{{ vllm_omni_plan.router.per_host[inventory_hostname].admin_readiness_url }}"
"""

RETURN = r"""
targets:
  description: Each target's C(name), C(unit), C(url), C(status) (HTTP status or null), C(healthy), C(problem),
    and C(journal) (its newest lines, only while it is not healthy).
  type: list
  elements: dict
  returned: always
waited:
  description: Seconds waited (set by the action).
  type: float
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vllm_omni.serve.plugins.module_utils._health import ARGUMENT_SPEC, incomplete, look


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    targets = module.params["targets"]
    missing = incomplete(targets)
    if missing:
        module.fail_json(msg=f"targets {', '.join(missing)} lack a name, unit or health_url")
    seen = look(targets, module.params["journal_lines"], module.params["request_timeout"])
    module.exit_json(changed=False, targets=seen, waited=0.0)


if __name__ == "__main__":
    main()
