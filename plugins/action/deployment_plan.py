# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""Controller-side action for vllm_omni.serve.deployment_plan (documentation in plugins/modules)."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.vllm_omni.serve.plugins.module_utils._action_options import (
    DEPLOYMENT_PLAN,
    OptionsError,
    checked_options,
    refusal,
)
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan import _controller_files
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._inventory import inventory_from_hostvars
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan, gc_paused
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._problems import PlanError
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._summary import summary_lines
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime import _discovery
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts._render import RenderDirError, render_tree, write_tree


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        try:
            args = checked_options(DEPLOYMENT_PLAN, self._task.args)
        except OptionsError as error:
            result.update(failed=True, msg=refusal("controller (localhost)", "deployment_plan", error))
            return result
        pending, use_cache = args["discovery_pending"], args["discovery_cache"]
        limited = None if args["run_hosts"] is None else set(args["run_hosts"])  # None: no --limit
        try:
            inventory, plan, written, from_cache = self._plan(task_vars, pending, use_cache, limited)
        except PlanError as error:
            result.update(failed=True, msg=str(error))
            return result
        except OSError as error:  # the cache directory: say where, no traceback
            result.update(failed=True, msg=f"controller (localhost): the discovery cache {_discovery.cache_dir()}: "
                                           f"{error.strerror or error} -> make it writable, or point VLLM_OMNI_CACHE "
                                           "at a writable directory")
            return result
        if args["controller_files"]:  # render: what deploy's first play refuses on the controller, in this call
            found, warnings = _controller_files.findings(plan)
            for warning in warnings:
                self._display.warning(warning)
            if found:
                result.update(failed=True, msg=_controller_files.message(found))
                return result
        limit = {"limited": limited is not None}
        if limited is not None:
            engine_and_services = sorted(inventory["hostvars"])
            limit.update(hosts=sorted(h for h in engine_and_services if h in limited),
                         outside=sorted(h for h in engine_and_services if h not in limited),
                         from_cache=from_cache, routers=_discovery.router_needs(plan, limited))
        rendered = args["render_dir"] is not None
        facts = {"vllm_omni_plan": plan, "vllm_omni_limit": limit} if args["as_fact"] and not rendered \
            else {"vllm_omni_limit": limit}
        result.update(changed=False, ansible_facts=facts, summary=summary_lines(plan),
                      warnings_count=len(plan["warnings"]), discovery_cached=written)
        if rendered:  # render.yml: the files and the counts, not the plan (costlier to hand back than to compute)
            try:
                with gc_paused():
                    outcome = write_tree(render_tree(plan), args["render_dir"], check_mode=self._task.check_mode)
            except (RenderDirError, OSError) as error:
                result.update(failed=True, msg=f"controller (localhost): the render directory: {error}")
                return result
            result.update(changed=outcome.pop("changed"), render=outcome)
        elif not args["as_fact"]:
            result["plan"] = plan
        return result

    def _plan(self, task_vars: dict, pending: bool, use_cache: bool, limited: set | None) -> tuple:
        """(inventory, plan, hosts written to the discovery cache, hosts filled from it); PlanError or OSError."""
        inventory = inventory_from_hostvars(task_vars["hostvars"], task_vars["groups"])
        directory = _discovery.cache_dir()
        written = []
        if use_cache and not self._task.check_mode and not pending:
            # What this run discovered (the second pass, after facts.yml) is kept for later limited runs.
            written = [host for host, variables in sorted(inventory["hostvars"].items())
                       if (limited is None or host in limited) and _discovery.write(directory, host, variables)]
        from_cache: list[str] = []
        if use_cache and limited is not None:
            hosts = inventory["hostvars"].keys() - limited
            from_cache, problems = _discovery.fill_from_cache(
                inventory, limited, {host: _discovery.read(directory, host) for host in hosts})
            if problems:
                raise PlanError(problems)
        plan = build_plan(inventory, discovery_pending=pending)
        if limited is not None:
            problems = _discovery.limit_problems(plan, limited)
            if problems:
                raise PlanError(problems)
        return inventory, plan, written, from_cache
