# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Read the planner's input out of Ansible's ``hostvars`` and ``groups``.

Only the variables the planner reads are templated, by exact name: its documented settings, the
GPU facts discovery sets, and ``ansible_host``. Other names that look like settings (unknown
``vllm_omni_*`` names, near misses) reach the planner as names only, for the misspelling check,
and are never templated: a Jinja expression or a vaulted value there is not evaluated (the
standard ``vllm_omni_api_key: "{{ vault_vllm_omni_api_key }}"`` indirection works, and planning
or rendering never needs the vault password). Secrets are never templated either: only whether
they are set. Values are converted to plain Python types so the planner never sees Ansible's
wrapper types.
"""

from __future__ import annotations

from typing import Any

from ._hosts import ENGINE_GROUP, MASTER_GROUP, MONITORING_GROUP, ROUTER_GROUP
from ._problems import PlanError, Problem, merge_hosts
from ._settings import COMPUTED_FACTS, REMOVED_SETTINGS, SECRET, SETTINGS

# Secrets are never templated here (no vault password needed to plan or render): only their presence.
SECRET_NAMES = frozenset(s.name for s in SETTINGS if s.scope == SECRET)
PRESENT = "<set; secret>"
NOT_READ = "<not read: not a setting>"
# Templated and passed on: every documented non-secret setting, discovery's facts, the address default.
READ = frozenset(s.name for s in SETTINGS if s.scope != SECRET) | {"vllm_omni_gpu_facts", "vllm_omni_os_facts",
                                                                   "ansible_host"}
# Facts the plan play sets on localhost (where everything reads them): never a misspelled setting.
PLAY_FACTS = frozenset({"vllm_omni_limit"})


def _looks_like_a_setting(name: str) -> bool:
    """Worth the misspelling check (by name only): anything near the collection's prefix."""
    lowered = name.lower()
    return "vllm" in lowered or "omni" in lowered or lowered.startswith("vlm")


def plain(value: Any) -> Any:
    """Ansible's tagged/lazy containers -> plain dict/list/str/int/float/bool/None."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, dict) or hasattr(value, "items"):
        return {plain(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


# Secrets whose value must not reach any setting the planner reads (it would land in argv, the plan and the render).
SEARCHED_SECRETS = (*sorted(SECRET_NAMES), "engine_hf_token")
MIN_SEARCHED = 8  # shorter values would match ordinary text by chance


def _secret_values(host_vars: Any) -> dict[str, str]:
    """Each secret of a host that can be read without a vault password: name (or name[i]) -> value.

    A secret that cannot be read here (a vault without its password, an undefined indirection) is skipped:
    planning and rendering never need the vault; deploy checks it again with the vault open (secrets_check)."""
    found: dict[str, str] = {}
    for name in SEARCHED_SECRETS:
        if name not in host_vars:
            continue
        try:
            value = plain(host_vars[name])
        except Exception:  # noqa: S112 - never a reason to stop planning; never shown
            continue
        items = value if isinstance(value, list) else [value]
        for index, item in enumerate(items):
            if isinstance(item, str) and len(item.strip()) >= MIN_SEARCHED:
                found[f"{name}[{index}]" if isinstance(value, list) else name] = item.strip()
    return found


def _holds(value: Any, needle: str) -> bool:
    if isinstance(value, str):
        return needle in value
    if isinstance(value, dict):
        return any(_holds(k, needle) or _holds(v, needle) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds(item, needle) for item in value)
    return False


def _secret_in_settings(host: str, host_vars: Any, selected: dict) -> list[Problem]:
    """A setting whose value holds a secret's (Jinja that reads the secret, or the same text pasted): refused
    by name and setting, never by value, before the plan (argv, plan.json, the render, -v output) can hold it."""
    secrets = _secret_values(host_vars) if any(name in host_vars for name in SEARCHED_SECRETS) else {}
    problems = []
    for setting, value in sorted(selected.items()):
        if value in (PRESENT, NOT_READ) or setting in SECRET_NAMES:
            continue
        for secret, text in sorted(secrets.items()):
            if _holds(value, text):
                problems.append(Problem(f"host {host}", setting, f"holds the value of {secret}, a secret: it would "
                                        "reach argv, plan.json, the render directory and the plan's output",
                                        f"give {setting} a value of its own (no Jinja that reads {secret.split('[')[0]}"
                                        f"); keep the secret in {secret.split('[')[0]} only"))
                break
    return problems


def inventory_from_hostvars(hostvars: Any, groups: Any) -> dict:
    engine_hosts = [str(h) for h in (groups.get(ENGINE_GROUP) or [])]
    router_hosts = [str(h) for h in (groups.get(ROUTER_GROUP) or [])]
    master_hosts = [str(h) for h in (groups.get(MASTER_GROUP) or [])]
    monitoring_hosts = [str(h) for h in (groups.get(MONITORING_GROUP) or [])]
    variables: dict[str, dict] = {}
    problems = []
    for host in dict.fromkeys(engine_hosts + router_hosts + master_hosts + monitoring_hosts):
        host_vars = hostvars[host]
        selected = {}
        for name in list(host_vars.keys()):
            name = str(name)
            if name in SECRET_NAMES:
                selected[name] = PRESENT
                continue
            if name not in READ:
                if (_looks_like_a_setting(name) or name in REMOVED_SETTINGS) and name not in COMPUTED_FACTS \
                        and name not in PLAY_FACTS:
                    selected[name] = NOT_READ
                continue
            try:
                selected[str(name)] = plain(host_vars[name])
            except Exception as error:  # templating errors of any kind: report, never a traceback
                problems.append(Problem(f"host {host}", str(name), f"could not be evaluated: {error}",
                                        "fix the Jinja expression or the variable it refers to"))
        problems.extend(_secret_in_settings(host, host_vars, selected))
        variables[host] = selected
    if problems:
        raise PlanError(merge_hosts(problems))
    return {"engine_hosts": engine_hosts, "router_hosts": router_hosts, "master_hosts": master_hosts,
            "monitoring_hosts": monitoring_hosts, "hostvars": variables}
