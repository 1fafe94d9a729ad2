# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""Action: what deploy checks on the controller before any host changes (plugin_utils/plan/_secrets.py): the secrets,
the operator's TLS material and a controller model directory. The result never holds a secret. With ``secrets:
false`` (render.yml, which needs no vault password) only the TLS files and the model directory are checked."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.vllm_omni.serve.plugins.module_utils._action_options import (
    SECRETS_CHECK,
    OptionsError,
    checked_options,
    refusal,
)
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan import _artifacts, _secrets, _tls_material
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._inventory import plain

SECRET_VARIABLES = ("vllm_omni_api_key", "engine_hf_token", "vllm_omni_hf_token")
# The fix of each kind of problem: the setting that resolves it.
KEY_FIX = ("keep secrets in Ansible Vault and refer to them only from vllm_omni_api_key(s) / vllm_omni_hf_token "
           "(docs/security.md)")
HF_FIX = ("set vllm_omni_hf_token once for the deployment (group_vars), in Ansible Vault and without a trailing "
          "newline: ansible-vault encrypt_string -n vllm_omni_hf_token 'hf_...'")
TLS_FIX = ("put the right PEM files at vllm_omni_tls_cert_file / vllm_omni_tls_key_file (/ vllm_omni_tls_ca_file): "
           "a certificate valid now whose key is vllm_omni_tls_key_file and whose IP subjectAltNames list every "
           "router host's vllm_omni_ip; or unset both and let the collection make them")
MODEL_FIX = ("point vllm_omni_model_directory at the model's own directory (config.json, *.safetensors, tokenizer: "
             "a `hf download --local-dir` result)")
TLS_SETTINGS = {"cert_file": "vllm_omni_tls_cert_file", "key_file": "vllm_omni_tls_key_file",
                "ca_file": "vllm_omni_tls_ca_file"}


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
        found: list[tuple[str, str]] = []
        if args["secrets"]:  # off (render): only the controller's files, which need no vault password
            found, key_sets = self._secret_findings(hostvars, hosts, engine_hosts, required, plan)
            if plan is not None:
                found += [(p, KEY_FIX) for p in _secrets.leaks(plan, self._secret_values(hostvars, hosts, key_sets))]
        warnings: list[str] = []
        if plan is not None:
            tls_found, warnings = _tls_findings(plan)
            found += tls_found + _model_findings(plan)
        for warning in warnings:
            self._display.warning(warning)
        result.update(changed=False, problems=[str(p) for p, _fix in found], tls_warnings=warnings)
        if found:
            result.update(failed=True, msg=_message(found))
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


def _tls_findings(plan: dict) -> tuple[list[tuple[str, str]], list[str]]:
    """(problem, fix) and warnings of the operator's TLS files, where the front door uses provided ones."""
    found: list[tuple[str, str]] = []
    tls = ((plan.get("router") or {}).get("frontdoor") or {}).get("tls") or {}
    if not (tls.get("source") == "provided" and plan["router"]["frontdoor"].get("enabled", True)):
        return found, []
    files = _tls_material.tls_file_problems({setting: tls.get(field) for field, setting in TLS_SETTINGS.items()})
    found += [(p, getattr(p, "fix", TLS_FIX)) for p in files]
    if files:
        return found, []
    addresses = {host: entry["ip"] for host, entry in plan["router"]["per_host"].items()}
    problems, tls_warnings = _tls_material.tls_material_problems(
        tls["cert_file"], tls["key_file"], tls.get("ca_file"), addresses)
    return found + [(p, getattr(p, "fix", TLS_FIX)) for p in problems], tls_warnings


def _model_findings(plan: dict) -> list[tuple[str, str]]:
    """(problem, fix) of each model staged from a controller directory."""
    found: list[tuple[str, str]] = []
    for item in (plan.get("artifacts") or {}).get("items", []):
        source = item.get("source") or {}
        if item.get("kind") == "model" and source.get("kind") == "directory" and source.get("directory"):
            found += [(p, MODEL_FIX) for p in _artifacts.model_directory_problems(
                source["directory"], weights_needed=not _dummy_weights(plan))]
    return found


def _message(found: list[tuple[str, str]]) -> str:
    """The problems in order, those that share a fix (one after the other) joined before it."""
    parts, fixes = [], []
    for problem, fix in found:
        if fixes and fixes[-1] == fix:
            parts[-1].append(problem)
        else:
            parts.append([problem])
            fixes.append(fix)
    return "; ".join(f"{'; '.join(ps)} -> {fix}" for ps, fix in zip(parts, fixes, strict=True))


def _dummy_weights(plan: dict) -> bool:
    """A stage override loads random weights (load_format: dummy): the directory needs no weights then."""
    overrides = ((plan.get("settings") or {}).get("vllm_omni_stage_engine_args") or {}).get("value") or {}
    return any(isinstance(args, dict) and args.get("load_format") == "dummy" for args in overrides.values())
