# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Every inventory setting the collection reads, from the one table of them, ``data/settings.yml``.

The table is data (name, scope, default, type, check, meaning; its header says how an entry is written); this
module turns each entry into a ``Setting`` whose check is the named checker with the entry's arguments. The planner
validates and defaults from ``SETTINGS``, ``docs/variables.md`` is generated from it (``make docs``; a unit test
fails when they drift), and unknown or misspelled ``vllm_omni_*`` names are found by comparing against it.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from ..host import _platforms
from ..host._engine_data import DATA_DIR, _load_yaml
from . import _checkers, _path_checks
from ._checkers import Setting, check_choice

HOST = "host"
DEPLOYMENT = "deployment"
PLAYBOOK = "playbook"  # read by a playbook (usually from -e), not part of the plan
SECRET = "secret"  # noqa: S105 - a scope name: read by the roles on the hosts only; never in the plan

# Names the collection itself sets as facts during a run; they appear in hostvars on a second
# pass and are not user settings.
COMPUTED_FACTS = frozenset({"vllm_omni_plan", "vllm_omni_gpu_facts", "vllm_omni_os_facts"})

# Removed or renamed settings; the check runs before any host is contacted, so a rename never
# silently drops a user's value.
REMOVED_SETTINGS: dict[str, tuple[str, str]] = {  # name -> (what became of it, what to write instead)
    "frontdoor_certificate_days": ("it is the setting vllm_omni_tls_certificate_days now, checked with the others "
                                   "before any host is contacted", "write vllm_omni_tls_certificate_days instead"),
    "frontdoor_certificate_renew_days": ("it is the setting vllm_omni_tls_certificate_renew_days now, checked with "
                                         "the others before any host is contacted",
                                         "write vllm_omni_tls_certificate_renew_days instead"),
}


# --- the table (data/settings.yml) -----------------------------------------------------------


def check_host_platform(value: Any, name: str) -> str:
    """``auto`` or one of data/platforms.yml's platforms."""
    return check_choice(value, name, ("auto", *_platforms.platform_ids()))


# Every checker an entry may name: check_<kind> of plan/_checkers.py and plan/_path_checks.py, and the one above.
CHECKERS = {name.removeprefix("check_"): function
            for module in (_checkers, _path_checks) for name, function in vars(module).items()
            if name.startswith("check_") and callable(function)}
CHECKERS["host_platform"] = check_host_platform


def _checker(name: str, spec: Any):
    """The check of the entry ``name``: a checker by kind, with the entry's arguments bound (validated here, so a
    table mistake fails the first import with the entry's name, not a user's run)."""
    if isinstance(spec, str):
        kind, arguments = spec, {}
    else:
        kind, arguments = spec.get("kind"), {k: v for k, v in spec.items() if k != "kind"}
    if kind not in CHECKERS:
        raise ValueError(f"data/settings.yml {name}: no checker {kind!r} (one of {', '.join(sorted(CHECKERS))})")
    function = CHECKERS[kind]
    arguments = {k: tuple(v) if isinstance(v, list) else v for k, v in arguments.items()}
    try:
        inspect.signature(function).bind(None, name, **arguments)
    except TypeError as error:
        raise ValueError(f"data/settings.yml {name}: check {kind}: {error}") from None
    return functools.partial(function, **arguments) if arguments else function


FIELDS = {"name", "scope", "default", "type", "default_doc", "check", "doc"}


def _setting(entry: dict) -> Setting:
    unknown = set(entry) - FIELDS
    if unknown or not {"name", "scope", "type", "doc"} <= set(entry):
        raise ValueError(f"data/settings.yml {entry.get('name')}: fields {sorted(entry)}; allowed {sorted(FIELDS)}")
    if entry["scope"] not in (HOST, DEPLOYMENT, PLAYBOOK, SECRET):
        raise ValueError(f"data/settings.yml {entry['name']}: scope {entry['scope']!r}")
    extra = {"check": _checker(entry["name"], entry["check"])} if "check" in entry else {}
    return Setting(entry["name"], entry["scope"], entry.get("default"), entry["type"], entry["doc"],
                   default_doc=entry.get("default_doc"), **extra)


SETTINGS: tuple[Setting, ...] = tuple(_setting(entry) for entry in _load_yaml(DATA_DIR / "settings.yml")["settings"])
BY_NAME = {setting.name: setting for setting in SETTINGS}


@functools.lru_cache(maxsize=1)
def role_variables() -> dict[str, str]:
    """Each role's own variables (its meta/argument_specs.yml; the vllm_omni_* ones are settings) -> the playbook
    that runs the role: what a name like vllm_omni_bench_concurrency most likely meant. Read only on a miss."""
    roles = DATA_DIR.parent / "roles"
    playbooks = DATA_DIR.parent / "playbooks"
    found = {}
    for specs in sorted(roles.glob("*/meta/argument_specs.yml")):
        role = specs.parent.parent.name
        playbook = f"{role}.yml" if (playbooks / f"{role}.yml").is_file() else "deploy.yml"
        for entry in (_load_yaml(specs).get("argument_specs") or {}).values():
            found.update({name: playbook for name in entry.get("options") or {} if not name.startswith("vllm_omni_")})
    return found
