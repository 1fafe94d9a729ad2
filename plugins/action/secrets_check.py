# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""Action: what deploy checks on the controller before any host changes (plugin_utils/plan/_secrets.py): the secrets,
the operator's TLS material and a controller model directory (plan/_controller_files.py, which render.yml's plan
task checks too). The result never holds a secret."""

from __future__ import annotations

from pathlib import Path

from ansible.plugins.action import ActionBase

from ansible_collections.vllm_omni.serve.plugins.module_utils._action_options import (
    SECRETS_CHECK,
    OptionsError,
    checked_options,
    refusal,
)
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan import _controller_files, _plain_secrets, _secrets
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._inventory import plain

SECRET_VARIABLES = ("vllm_omni_api_key", "engine_hf_token", "vllm_omni_hf_token")
# The fix of each kind of problem: the setting that resolves it.
KEY_FIX = ("keep secrets in Ansible Vault and refer to them only from vllm_omni_api_key(s) / vllm_omni_hf_token "
           "(docs/security.md)")
HF_FIX = ("set vllm_omni_hf_token once for the deployment (group_vars), in Ansible Vault and without a trailing "
          "newline: ansible-vault encrypt_string -n vllm_omni_hf_token 'hf_...'")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def _read(self, hostvars, host: str, name: str):
        try:
            value = hostvars[host].get(name)
            return None if value is None else plain(value)
        except Exception as error:  # vault locked, undefined indirection: reported by class name only
            return error

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        try:  # the plan is type-checked, not copied
            args = checked_options(SECRETS_CHECK, self._task.args, large=("plan",))
        except OptionsError as error:
            return {**result, "failed": True, "msg": refusal("controller (localhost)", "secrets_check", error)}
        hostvars = (task_vars or {})["hostvars"]
        hosts, required = args["hosts"], args["required"]
        engine_hosts = args["engine_hosts"] or hosts
        plan = None if args["plan"] is None else plain(args["plan"])
        found, key_sets = self._secret_findings(hostvars, hosts, engine_hosts, required, plan)
        warnings: list[str] = []
        if plan is not None:
            found += [(p, KEY_FIX) for p in _secrets.leaks(plan, self._secret_values(hostvars, hosts, key_sets))]
            controller_found, warnings = _controller_files.findings(plan)
            found += controller_found
        # A plain-text secret still works: said, not refused (a lab or a throw-away deployment may mean it).
        plain_text = _plain_secrets.plain_text_findings(
            list((task_vars or {}).get("ansible_inventory_sources") or []),
            (*SECRET_VARIABLES, "vllm_omni_api_keys"), Path.cwd())
        for warning in warnings + [_plain_secrets.warning(path, variable) for path, variable in plain_text]:
            self._display.warning(warning)
        result.update(changed=False, problems=[str(p) for p, _fix in found], tls_warnings=warnings,
                      plain_text=[{"file": path, "variable": variable} for path, variable in plain_text])
        if found:
            result.update(failed=True, msg=_controller_files.message(found))
        return result

    def _secret_findings(self, hostvars, hosts: list[str], engine_hosts: list[str], required: bool,
                         plan: dict | None) -> tuple[list[tuple[str, str]], dict]:
        """(problem, fix) of each secret as the hosts hold it, and each host's vllm_omni_api_keys as read."""
        found: list[tuple[str, str]] = []  # (problem, fix)
        keys = {host: self._read(hostvars, host, "vllm_omni_api_key") for host in hosts}
        found += [(p, getattr(p, "fix", KEY_FIX)) for p in _secrets.key_problems(keys, required)]
        # The keys clients may send to the front door during a rotation (and every key in them).
        key_sets = {host: self._read(hostvars, host, "vllm_omni_api_keys") for host in hosts}
        frontdoor = bool(((plan or {}).get("router") or {}).get("frontdoor", {}).get("enabled", True))
        found += [(p, KEY_FIX) for p in _secrets.key_set_problems(key_sets, required, frontdoor)]
        # Every other secret: one value for the engine hosts (the only hosts that read one), well formed.
        for name in _secrets.SECRET_FORMATS:
            values = {host: self._read(hostvars, host, name) for host in engine_hosts}
            found += [(p, HF_FIX.replace("vllm_omni_hf_token", name)) for p in _secrets.secret_problems(name, values)]
        return found, key_sets

    def _secret_values(self, hostvars, hosts: list[str], key_sets: dict) -> dict[str, str]:
        """Every secret value the hosts hold, by the variable (and position) it is in: what the plan must not hold."""
        values = {}
        for host in hosts:
            for name in SECRET_VARIABLES:
                value = self._read(hostvars, host, name)
                if isinstance(value, str):
                    values[name] = value
            if isinstance(key_sets[host], list):
                values.update({f"vllm_omni_api_keys[{index}]": value for index, value in enumerate(key_sets[host])
                               if isinstance(value, str)})
        return values
