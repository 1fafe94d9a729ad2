# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""Action: the secrets checked on the controller (plugin_utils/_secrets.py); the result never holds one."""

from __future__ import annotations

from typing import ClassVar

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.vllm_omni.serve.plugins.plugin_utils import _secrets
from ansible_collections.vllm_omni.serve.plugins.plugin_utils._inventory import plain

SECRET_VARIABLES = ("vllm_omni_api_key", "engine_hf_token", "vllm_omni_hf_token")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("hosts", "required", "plan"))
    TLS_SETTINGS: ClassVar[dict[str, str]] = {"cert_file": "vllm_omni_tls_cert_file",
                                              "key_file": "vllm_omni_tls_key_file", "ca_file": "vllm_omni_tls_ca_file"}

    def _read(self, hostvars, host: str, name: str):
        try:
            value = hostvars[host].get(name)
            return None if value is None else plain(value)
        except Exception as error:  # vault locked, undefined indirection: reported by class name only
            return error

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        hostvars = (task_vars or {})["hostvars"]
        hosts = [str(h) for h in self._task.args.get("hosts") or []]
        required = boolean(self._task.args.get("required", True), strict=True)
        keys = {host: self._read(hostvars, host, "vllm_omni_api_key") for host in hosts}
        problems = _secrets.key_problems(keys, required)
        plan = self._task.args.get("plan")
        # The keys clients may send to the front door during a rotation (and every key in them).
        key_sets = {host: self._read(hostvars, host, "vllm_omni_api_keys") for host in hosts}
        frontdoor = bool((((plan or {}).get("router") or {}).get("frontdoor") or {}).get("enabled", True)) \
            if isinstance(plan, dict) else True
        problems += _secrets.key_set_problems(key_sets, required, frontdoor)
        if isinstance(plan, dict):
            found = {}
            for host in hosts:
                for name in SECRET_VARIABLES:
                    value = self._read(hostvars, host, name)
                    if isinstance(value, str):
                        found[name] = value
                if isinstance(key_sets[host], list):
                    found.update({f"vllm_omni_api_keys[{index}]": value for index, value in enumerate(key_sets[host])
                                  if isinstance(value, str)})
            problems += _secrets.leaks(plain(plan), found)
            tls = ((plan.get("router") or {}).get("frontdoor") or {}).get("tls") or {}
            if tls.get("source") == "provided":
                problems += _secrets.tls_file_problems(
                    {setting: tls.get(field) for field, setting in self.TLS_SETTINGS.items()})
        result.update(changed=False, problems=problems)
        if problems:
            result.update(failed=True, msg="; ".join(problems) + " -> keep secrets in Ansible Vault and refer to "
                          "them only from vllm_omni_api_key(s) / engine_hf_token (docs/security.md)")
        return result
