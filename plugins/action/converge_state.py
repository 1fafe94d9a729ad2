# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""Action for vllm_omni.serve.converge_state (documentation in plugins/modules): mix the host's operator
variables into the controller's digest, then judge the look host_facts took on the host earlier in the run, or
take the module's one look there."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.vllm_omni.serve.plugins.module_utils._action_options import (
    CONVERGE_STATE,
    OptionsError,
    checked_options,
    refusal,
)
from ansible_collections.vllm_omni.serve.plugins.module_utils._converge import judge
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime._converge import (
    host_digest,
    operator_variables,
    variables_digest,
)

# The variables' digest taken by the check, which the record at the end of the run writes: by then the run's
# own tasks have set variables of the same prefixes, which are not the operator's.
VARIABLES_FACT = "converge_variables_digest"


class ActionModule(ActionBase):
    _supports_check_mode = True

    def _expanded(self, variables: dict) -> dict:
        """Each value as the deploy will see it (a lookup of a key file reads the file); as written where it
        cannot be expanded here."""
        expanded = {}
        for name, value in variables.items():
            try:
                expanded[name] = self._templar.template(value)
            except Exception:  # pylint: disable=broad-exception-caught  # an undefined or failing template: as written
                expanded[name] = value
        return expanded

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        host = task_vars.get("inventory_hostname", self._play_context.remote_addr)
        try:
            args = checked_options(CONVERGE_STATE, self._task.args, large=("look",))
        except OptionsError as error:
            return {**result, "failed": True, "msg": refusal(host, "converge_state", error)}
        facts = {}
        if args["state"] != "absent":
            variables = task_vars.get(VARIABLES_FACT) if args["state"] == "present" else None
            if not variables:
                variables = variables_digest(self._expanded(operator_variables(task_vars)))
                facts[VARIABLES_FACT] = variables
            args["digest"] = host_digest(args["digest"], variables)
        taken = args.pop("taken", None)
        if args["state"] == "check" and taken and taken.get("path") == args["path"]:
            # The look was taken in the host's discovery call (host_facts): judged here, the host is reached once.
            return {**result, "changed": False, **judge(taken, args["digest"], args["look"]),
                    "ansible_facts": facts}
        seen = self._execute_module(module_name="vllm_omni.serve.converge_state", module_args=args,
                                    task_vars=task_vars)
        if facts and not seen.get("failed"):
            seen["ansible_facts"] = {**seen.get("ansible_facts", {}), **facts}
        return {**result, **seen}
