# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""Controller-side action for vllm_omni.serve.render_plan (documentation in plugins/modules)."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.vllm_omni.serve.plugins.module_utils._action_options import (
    RENDER_PLAN,
    OptionsError,
    checked_options,
    refusal,
)
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._inventory import plain
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import gc_paused
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts._render import RenderDirError, render_tree, write_tree


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        try:  # the plan is type-checked, not copied (a whole fleet's plan)
            args = checked_options(RENDER_PLAN, self._task.args, large=("plan",))
        except OptionsError as error:
            raise AnsibleActionFail(refusal("controller (localhost)", "render_plan", error)) from None
        plan, dest = args["plan"], args["dest"]
        if "hosts" not in plan:
            raise AnsibleActionFail("render_plan: plan must be the output of the vllm_omni.serve.plan filter")
        if not dest:
            raise AnsibleActionFail("render_plan: dest is empty; name a directory, e.g. dest: /tmp/vllm-omni-render")
        try:
            with gc_paused():  # plain() copies the whole plan: millions of new containers at 1,000s of hosts
                tree = render_tree(plain(plan))
            outcome = write_tree(tree, dest, check_mode=self._task.check_mode)
        except (RenderDirError, OSError) as error:
            raise AnsibleActionFail(f"render_plan: {error}") from None
        result.update(outcome)
        return result
