# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""The options of the collection's actions, in one place: each action checks its task's options against its
module's spec before it does anything (one line on bad input, not a traceback or a half-run), and each
module's stub declares the same spec (which sanity's validate-modules compares with the documentation).

health_wait's spec lives with its look in _health.py; the others are here."""

from __future__ import annotations

from collections.abc import Mapping

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.errors import UnsupportedError

# Host paths are str, not path: a path option would be expanded (~, $VAR) on the controller, where the
# action runs, for a file on the host.
ARTIFACT_PULL = {
    "dest": {"type": "str", "required": True},
    "manifest": {"type": "str", "required": True},
    "sources": {"type": "list", "elements": "str", "required": True},
    "full": {"type": "bool", "default": False},
    "size": {"type": "int"},
    "timeout": {"type": "int", "default": 7200},
    "progress_interval": {"type": "int", "default": 10},
}
VENV_BUILD = {
    "path": {"type": "str", "required": True},
    "settings": {"type": "dict"},  # required to start a build (the action says so); not to wait for one
    "wait": {"type": "bool", "default": True},
    "job": {"type": "dict"},
    "timeout": {"type": "int", "default": 3600},
    "progress_interval": {"type": "int", "default": 15},
}
DEPLOYMENT_PLAN = {
    "discovery_pending": {"type": "bool", "default": False},
    "discovery_cache": {"type": "bool", "default": False},
    "run_hosts": {"type": "list", "elements": "str"},
    "as_fact": {"type": "bool", "default": True},
    "controller_files": {"type": "bool", "default": False},
    "render_dir": {"type": "path"},  # on the controller
}
RENDER_PLAN = {
    "plan": {"type": "dict", "required": True},
    "dest": {"type": "path", "required": True},  # on the controller
}
REPORT_FILES = {
    "dest": {"type": "path", "required": True},  # on the controller
    "documents": {"type": "dict", "required": True},
}
CONVERGE_STATE = {
    "state": {"type": "str", "required": True, "choices": ["check", "present", "absent"]},
    "path": {"type": "str", "required": True},
    "look": {"type": "dict", "default": {}},
    "digest": {"type": "str", "default": ""},
    "taken": {"type": "dict"},
}
SECRETS_CHECK = {
    "hosts": {"type": "list", "elements": "str", "required": True},
    "engine_hosts": {"type": "list", "elements": "str"},
    "required": {"type": "bool", "default": True},
    "plan": {"type": "dict"},
}


class OptionsError(ValueError):
    """The task's options do not fit the module's spec: the validator's first complaint."""


def checked_options(spec: dict, args: Mapping, large: tuple[str, ...] = ()) -> dict:
    """The task's options, converted and defaulted by ``spec``; OptionsError on the first that does not fit.

    The options in ``large`` (a whole plan) have their type checked without being copied: the validator deep
    copies what it checks, seconds for a 10,000-host plan. Their values come back as given."""
    shallow = {name: _stand_in(value) if name in large else value for name, value in args.items()}
    result = ArgumentSpecValidator(spec).validate(shallow)
    if result.errors.errors:
        first = result.errors.errors[0]
        prefix = "unsupported option: " if isinstance(first, UnsupportedError) else ""
        raise OptionsError(prefix + first.args[0])
    options = dict(result.validated_parameters)
    options.update({name: args[name] for name in large if isinstance(args.get(name), (Mapping, list, tuple))})
    return options


def refusal(host: str, module: str, error: Exception) -> str:
    """The one line a task with bad options fails with: the host, the module, what is wrong, where to look."""
    return f"{host}: vllm_omni.serve.{module}: {error} (its options: ansible-doc vllm_omni.serve.{module})"


def _stand_in(value):
    """An empty value of the same kind: what the type check sees in place of a large value."""
    if isinstance(value, Mapping):
        return {}
    if isinstance(value, (list, tuple)):
        return []
    return value


def controller_only(module: str, spec: dict, supports_check_mode: bool) -> None:
    """A module stub's main(): declare the action's spec (for ansible-doc and sanity) and refuse to run on a host."""
    stub = AnsibleModule(argument_spec=spec, supports_check_mode=supports_check_mode)
    stub.fail_json(msg=f"vllm_omni.serve.{module} runs as an action on the controller (plugins/action/{module}.py); "
                       "call it from a play, not with ansible -m")
