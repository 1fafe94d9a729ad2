"""The actions' shared option check (module_utils/_action_options.py): converted and defaulted by the module's
spec, the first misfit as one line, a whole plan type-checked without being copied, and every module stub
declaring the very spec its action checks."""

from __future__ import annotations

import importlib

import pytest

from ansible_collections.vllm_omni.serve.plugins.module_utils import _action_options, _health
from ansible_collections.vllm_omni.serve.plugins.module_utils._action_options import OptionsError, checked_options


def test_options_are_converted_and_defaulted():
    options = checked_options(_action_options.ARTIFACT_PULL, {
        "dest": "/srv/m", "manifest": "/m.json", "sources": "rsync://a/m,rsync://b/m", "full": "yes", "timeout": "90"})
    assert options == {"dest": "/srv/m", "manifest": "/m.json", "sources": ["rsync://a/m", "rsync://b/m"],
                       "full": True, "size": None, "timeout": 90, "progress_interval": 10}


def test_host_paths_are_not_expanded_on_the_controller():
    options = checked_options(_action_options.VENV_BUILD, {"path": "~/venv-$USER", "settings": {}})
    assert options["path"] == "~/venv-$USER"


@pytest.mark.parametrize("spec, args, message", [
    ("VENV_BUILD", {"path": "/v", "settings": {}, "timeout": "an hour"}, "argument 'timeout' is of type str"),
    ("VENV_BUILD", {"settings": {}}, "missing required arguments: path"),  # settings: the action, to start one
    ("DEPLOYMENT_PLAN", {"discovery_pending": "perhaps"}, "argument 'discovery_pending' is of type str"),
    ("DEPLOYMENT_PLAN", {"limit": ["lab-1"]}, "unsupported option: limit. Supported parameters include"),
    ("SECRETS_CHECK", {"hosts": ["a"], "required": "maybe"}, "argument 'required' is of type str"),
    ("RENDER_PLAN", {"plan": ["hosts"], "dest": "/tmp/r"}, "argument 'plan' is of type list"),
    ("REPORT_FILES", {"dest": "/tmp/r", "documents": "a=1"}, None),  # a k=v string is a dict to Ansible
])
def test_the_first_misfit_is_one_line(spec, args, message):
    if message is None:
        assert checked_options(getattr(_action_options, spec), args, large=("documents",))["documents"] == {"a": "1"}
        return
    with pytest.raises(OptionsError) as raised:
        checked_options(getattr(_action_options, spec), args, large=("plan",))
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)


def test_a_large_option_is_checked_by_type_and_handed_back_uncopied():
    plan = {"hosts": {f"h{index}": {"pipelines": [{"ports": list(range(8))}]} for index in range(50)}}
    options = checked_options(_action_options.RENDER_PLAN, {"plan": plan, "dest": "/tmp/render"}, large=("plan",))
    assert options["plan"] is plan  # not a deep copy
    with pytest.raises(OptionsError, match="argument 'plan' is of type list"):
        checked_options(_action_options.RENDER_PLAN, {"plan": [plan], "dest": "/tmp/r"}, large=("plan",))
    with pytest.raises(OptionsError, match="missing required arguments: plan"):
        checked_options(_action_options.RENDER_PLAN, {"dest": "/tmp/r"}, large=("plan",))


def test_the_refusal_names_host_module_and_where_to_look():
    line = _action_options.refusal("lab-1", "venv_build", OptionsError("missing required arguments: settings"))
    assert line == ("lab-1: vllm_omni.serve.venv_build: missing required arguments: settings "
                    "(its options: ansible-doc vllm_omni.serve.venv_build)")


@pytest.mark.parametrize("module, spec", [
    ("artifact_pull", _action_options.ARTIFACT_PULL), ("venv_build", _action_options.VENV_BUILD),
    ("deployment_plan", _action_options.DEPLOYMENT_PLAN), ("render_plan", _action_options.RENDER_PLAN),
    ("report_files", _action_options.REPORT_FILES), ("secrets_check", _action_options.SECRETS_CHECK),
    ("health_wait", _health.ARGUMENT_SPEC),
])
def test_each_module_declares_the_spec_its_action_checks(monkeypatch, module, spec):
    stub = importlib.import_module(f"ansible_collections.vllm_omni.serve.plugins.modules.{module}")
    declared = []

    class Declared(Exception):
        pass

    def capture(argument_spec, **_kwargs):
        declared.append(argument_spec)
        raise Declared

    monkeypatch.setattr(stub if module == "health_wait" else _action_options, "AnsibleModule", capture)
    with pytest.raises(Declared):
        stub.main()
    assert declared == [spec] and declared[0] is spec
