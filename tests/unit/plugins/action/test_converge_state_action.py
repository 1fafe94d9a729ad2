"""converge_state's action: the look host_facts took earlier in the run is judged on the controller (the host is not
reached again); without one, or one of another record, the module takes its own look."""

from __future__ import annotations

import pytest
from ansible.plugins.action import ActionBase

from ansible_collections.vllm_omni.serve.plugins.action import converge_state
from ansible_collections.vllm_omni.serve.plugins.module_utils._converge import fingerprint
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime._converge import host_digest, variables_digest

PATH = "/var/lib/vllm-omni/converge.json"
LOOK = {"files": ["/etc/vllm-omni/omni0/engine.env"], "units": ["vllm-omni@omni0.service"]}


class Task:
    def __init__(self, args):
        self.args = args


class PlayContext:
    remote_addr = "10.0.0.1"


@pytest.fixture
def action(monkeypatch):
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    executed = []

    def make(args):
        module = object.__new__(converge_state.ActionModule)
        module._task, module._play_context = Task(args), PlayContext()

        def execute(module_name, module_args, task_vars):
            executed.append(module_args)
            return {"changed": False, "in_sync": True, "reasons": []}

        module._execute_module = execute
        return module
    return make, executed


def recorded_digest(fleet: str) -> str:
    """What the deploy recorded for a host without operator variables: the fleet's digest mixed with theirs."""
    return host_digest(fleet, variables_digest({}))


def test_the_discovery_s_look_is_judged_here_and_the_host_is_not_reached_again(action):
    make, executed = action
    taken = {"path": PATH, "record": True, "digest": fingerprint(recorded_digest("fleet-1")),
             "look": fingerprint(LOOK), "reasons": []}
    args = {"state": "check", "path": PATH, "look": LOOK, "digest": "fleet-1", "taken": taken}
    result = make(args).run(task_vars={"inventory_hostname": "lab-1"})
    assert result["in_sync"] is True and result["reasons"] == [] and executed == []
    # Another fleet digest (a changed plan, collection, variable or TLS material): named, still no second call.
    result = make({**args, "digest": "fleet-2"}).run(task_vars={"inventory_hostname": "lab-1"})
    assert result["in_sync"] is False and "changed since the last whole deploy" in result["reasons"][0]
    # What the host found differing is what the check says.
    drifted = {**taken, "reasons": ["units vllm-omni@omni0.service: enabled up -> enabled down"]}
    result = make({**args, "taken": drifted}).run(task_vars={"inventory_hostname": "lab-1"})
    assert result["reasons"] == drifted["reasons"] and executed == []


@pytest.mark.parametrize("taken", [None, {}, {"path": "/elsewhere/converge.json", "record": False}])
def test_without_the_discovery_s_look_of_this_record_the_module_looks(action, taken):
    make, executed = action
    args = {"state": "check", "path": PATH, "look": LOOK, "digest": "fleet-1"}
    if taken is not None:
        args["taken"] = taken
    result = make(args).run(task_vars={"inventory_hostname": "lab-1"})
    assert result["in_sync"] is True and len(executed) == 1
    assert "taken" not in executed[0] and executed[0]["digest"] == recorded_digest("fleet-1")
