#!/usr/bin/python
# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: deployment_plan
short_description: Validate the inventory and set the vLLM-Omni deployment plan as a fact
version_added: 0.1.0
description:
  - Runs the planner (the same code as the P(vllm_omni.serve.plan#filter) filter) on the controller over the
    hosts of groups C(vllm_omni) and C(vllm_omni_router), and sets the fact C(vllm_omni_plan).
  - On bad input the task fails with one message listing every problem (host, variable, fix);
    nothing else runs and no host is touched.
  - The settings are the inventory's C(vllm_omni_*) variables (C(docs/variables.md)).
options:
  discovery_pending:
    description:
      - GPU discovery has not run yet (the first pass of C(deploy.yml)). Hosts without C(vllm_omni_gpus) then
        get no pipelines instead of an error; everything else is validated as usual.
    type: bool
    default: false
  discovery_cache:
    description:
      - Keep what discovery found on the controller (C($VLLM_OMNI_CACHE/discovery/<host>.json), GPU and OS facts
        only, written atomically, not in check mode) and plan the hosts outside O(run_hosts) from it.
      - A host outside O(run_hosts) with neither a cached discovery nor C(vllm_omni_gpus) is a problem that names
        the fix (run once without C(--limit), or add the host to it).
    type: bool
    default: false
  run_hosts:
    description:
      - The hosts this run changes (those of C(--limit)); omitted when the run has no limit.
      - A limit that changes some hosts of a pipeline spanning hosts and not the others is refused.
      - The fact C(vllm_omni_limit) then says which hosts are outside, which were planned from the cache and
        which router hosts outside the limit must already route to the limited hosts' pipelines.
    type: list
    elements: str
  as_fact:
    description:
      - Return the plan as the fact C(vllm_omni_plan) (on the host the task is delegated to with C(delegate_facts)).
      - With V(false) the plan is returned as RV(plan) only, to be registered (a C(run_once) task's result goes to
        every host of the play) and read from there. The collection's playbooks do so, because Ansible copies all of
        a host's facts each time its C(hostvars) are read, and a fleet's plan is large (23 MB at 1,024 hosts x 8 GPUs).
    type: bool
    default: true
  controller_files:
    description:
      - Also check the controller's files the plan names (the operator's TLS material, a controller model
        directory) as deploy's first play does, in this call, so that render.yml refuses what deploy would.
    type: bool
    default: false
  render_dir:
    description:
      - Write the plan and every host's files into this directory on the controller, in this call, as
        P(vllm_omni.serve.render_plan#module) does (C(plan.json), each pipeline's C(stage_config.yaml),
        C(engine.env) and argv, each host's units; files of hosts no longer planned removed), and return what was
        written as RV(render). The plan is then returned neither as a fact nor as RV(plan), since C(render.yml) needs only
        the summary and the counts, and handing a fleet's plan back to Ansible costs more than computing it.
      - Not in check mode, which writes nothing (RV(render) then says what would change).
    type: path
attributes:
  check_mode:
    support: full
    description: Computes the plan the same way; changes nothing in any mode but O(render_dir), which check mode leaves as it is.
extends_documentation_fragment:
  - vllm_omni.serve.attributes
author:
  - vllm_omni.serve contributors (@vllm-omni-serve)
"""

EXAMPLES = r"""
- name: Plan | validate the inventory and compute the plan
  vllm_omni.serve.deployment_plan:
  run_once: true
  delegate_to: localhost

- name: Plan | the same, the plan registered on every host of the play instead of a fact
  vllm_omni.serve.deployment_plan:
    as_fact: false
  register: plan_result
  run_once: true
  delegate_to: localhost
  delegate_facts: true  # vllm_omni_limit on localhost
"""

RETURN = r"""
ansible_facts:
  description:
    - C(vllm_omni_plan), the plan (see the P(vllm_omni.serve.plan#filter) filter for its keys); it is the same
      whatever the limit. Only with O(as_fact) and no O(render_dir).
    - C(vllm_omni_limit), what O(run_hosts) leaves out (C(limited), C(hosts), C(outside), C(from_cache), C(routers)).
  type: dict
  returned: success
plan:
  description: The plan, as the fact C(vllm_omni_plan) would hold it.
  type: dict
  returned: success, O(as_fact=false) and no O(render_dir)
summary:
  description: Human-readable lines, what you set versus what the collection computed.
  type: list
  elements: str
  returned: success
render:
  description: What O(render_dir) received, as P(vllm_omni.serve.render_plan#module) returns it.
  type: dict
  returned: success and O(render_dir)
  contains:
    dest:
      description: The directory written.
      type: str
    files:
      description: How many files the render holds.
      type: int
    added:
      description: The files that were not there before.
      type: list
      elements: str
    modified:
      description: The files whose text changed.
      type: list
      elements: str
    removed:
      description: The files no longer rendered, removed.
      type: list
      elements: str
discovery_cached:
  description: The hosts whose discovery was written to the controller's cache by this task.
  type: list
  elements: str
  returned: success
"""

from ansible_collections.vllm_omni.serve.plugins.module_utils._action_options import DEPLOYMENT_PLAN, controller_only


def main():
    controller_only("deployment_plan", DEPLOYMENT_PLAN, supports_check_mode=True)


if __name__ == "__main__":
    main()
