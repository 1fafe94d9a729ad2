# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""Controller-side action for vllm_omni.serve.deployment_plan (documentation in plugins/modules)."""

from __future__ import annotations

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.vllm_omni.serve.plugins.plugin_utils._inventory import inventory_from_hostvars
from ansible_collections.vllm_omni.serve.plugins.plugin_utils._planner import PlanError, build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils._summary import summary_lines


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("discovery_pending",))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        try:
            pending = boolean(self._task.args.get("discovery_pending", False), strict=True)
            plan = build_plan(inventory_from_hostvars(task_vars["hostvars"], task_vars["groups"]), discovery_pending=pending)
        except PlanError as error:
            result.update(failed=True, msg=str(error))
            return result
        result.update(changed=False, ansible_facts={"vllm_omni_plan": plan}, summary=summary_lines(plan),
                      warnings_count=len(plan["warnings"]))
        return result
