"""The controller-run actions other than health_wait: bad options fail in one line naming host and module
before any work (no script reaches a host, no plan is built, no file is written), and good ones reach the
work converted (booleans, whole numbers, host lists) and defaulted."""

from __future__ import annotations

import json

import pytest
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.vllm_omni.serve.plugins.action import (
    artifact_pull,
    deployment_plan,
    render_plan,
    report_files,
    secrets_check,
    venv_build,
)


class Task:
    def __init__(self, args, check_mode=False):
        self.args, self.check_mode = args, check_mode


class PlayContext:
    remote_addr = "10.0.0.1"


@pytest.fixture
def make(monkeypatch):
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})

    def build(plugin, args, check_mode=False):
        action = object.__new__(plugin.ActionModule)
        action._task, action._play_context = Task(args, check_mode), PlayContext()
        action._load_name = f"vllm_omni.serve.{plugin.__name__.rsplit('.', 1)[-1]}"
        return action
    return build


@pytest.fixture
def detached(monkeypatch):
    """run_detached of both long actions, recorded: what would have been started on the host."""
    started = []

    def run(action, script, interpreter, args, environment, timeout, on_progress, extra=""):
        started.append({"script": script, "args": args, "environment": environment, "timeout": timeout})
        return "0", json.dumps({"bytes_received": 5, "repaired": []}) + "\n", ""

    def start(action, script, interpreter, args, environment):
        started.append({"script": script, "args": args, "environment": environment})
        return {"dir": "/root/.ansible/tmp/ansible-tmp-1", "script": script, "group": "4242", "started": 1.0}

    def finish(action, job, timeout, on_progress, extra=""):
        started.append({"waited_for": job, "timeout": timeout})
        return "0", "", ""
    monkeypatch.setattr(artifact_pull, "run_detached", run)
    monkeypatch.setattr(venv_build, "start_detached", start)
    monkeypatch.setattr(venv_build, "finish_detached", finish)
    return started


PULL = {"dest": "/srv/model", "manifest": "/var/lib/vllm-omni-serve/artifacts/model.json",
        "sources": ["rsync://10.0.0.11:8873/model", "rsync://10.0.0.1:8873/model"]}


@pytest.mark.parametrize("args, needle", [
    ({**PULL, "timeout": "two hours"}, "argument 'timeout' is of type str"),
    ({**PULL, "full": "sometimes"}, "argument 'full' is of type str"),
    ({"dest": "/srv/model", "sources": PULL["sources"]}, "missing required arguments: manifest"),
    ({**PULL, "checksum": True}, "unsupported option: checksum"),
])
def test_artifact_pull_refuses_bad_options_before_the_host(make, detached, args, needle):
    result = make(artifact_pull, args).run(task_vars={"inventory_hostname": "lab-2"})
    assert result["failed"] and result["msg"].startswith(f"lab-2: vllm_omni.serve.artifact_pull: {needle}")
    assert detached == []


def test_artifact_pull_starts_the_pull_with_converted_options(make, detached):
    result = make(artifact_pull, {**PULL, "full": "yes", "timeout": "600"}).run(task_vars={"inventory_hostname": "h"})
    assert result["changed"] is True and result["bytes_received"] == 5
    assert detached == [{"script": "artifact.py", "timeout": 600, "environment": None,
                         "args": ["pull", PULL["dest"], PULL["manifest"], *PULL["sources"], "--full"]}]


def test_venv_build_refuses_bad_options_and_hands_settings_as_text(make, detached):
    refused = make(venv_build, {"path": "/opt/v", "settings": {}, "progress_interval": "often"}).run(
        task_vars={"inventory_hostname": "lab-1"})
    assert refused["failed"] and "argument 'progress_interval' is of type str" in refused["msg"]
    assert detached == []
    built = make(venv_build, {"path": "/opt/v", "settings": {"PYTHON_VENV_PINS": ["a==1"], "PYTHON_VENV_INSTALLER": "uv"}}
                 ).run(task_vars={"inventory_hostname": "lab-1"})
    assert built == {"changed": True, "path": "/opt/v"}
    assert detached[0]["environment"] == {
        "PYTHON_VENV_PINS": '["a==1"]', "PYTHON_VENV_INSTALLER": "uv", "PYTHON_VENV_PATH": "/opt/v"}
    assert detached[1]["timeout"] == 3600 and detached[1]["waited_for"]["group"] == "4242"  # started, then waited for


def test_venv_build_starts_in_one_task_and_waits_in_the_next(make, detached):
    settings = {"PYTHON_VENV_INSTALLER": "uv"}
    started = make(venv_build, {"path": "/opt/v", "settings": settings, "wait": False}).run(
        task_vars={"inventory_hostname": "lab-1"})
    assert started["changed"] is True and started["job"]["group"] == "4242"
    assert [entry["script"] for entry in detached] == ["build-venv.sh"]  # started, not waited for: the fork is free
    assert started["job"]["building"] == "/opt/v.new"  # what the wait measures while packages install
    waited = make(venv_build, {"path": "/opt/v", "job": started["job"], "timeout": 60}).run(
        task_vars={"inventory_hostname": "lab-1"})
    assert waited == {"changed": True, "path": "/opt/v"}
    assert detached[1] == {"waited_for": started["job"], "timeout": 60}  # that build, no second one started
    assert len(detached) == 2


@pytest.mark.parametrize("args, needle", [
    ({"path": "/opt/v"}, "settings is required to start a build"),
    ({"path": "/opt/v", "job": {"dir": "/tmp/x"}}, "job is not what a task with wait: false returned"),
    ({"path": "/opt/v", "settings": {"A": "1"}, "wait": "later"}, "argument 'wait' is of type str"),
])
def test_venv_build_refuses_a_start_without_settings_or_a_wait_without_a_job(make, detached, args, needle):
    result = make(venv_build, args).run(task_vars={"inventory_hostname": "lab-1"})
    assert result["failed"] and result["msg"].startswith(f"lab-1: vllm_omni.serve.venv_build: {needle}")
    assert detached == []


@pytest.mark.parametrize("args, needle", [
    ({"discovery_pending": "perhaps"}, "argument 'discovery_pending' is of type str"),
    ({"run_hosts": {"lab-1": True}}, "argument 'run_hosts' is of type dict"),
    ({"limit": ["lab-1"]}, "unsupported option: limit"),
])
def test_deployment_plan_refuses_bad_options_before_planning(make, monkeypatch, args, needle):
    planned = []
    monkeypatch.setattr(deployment_plan, "build_plan", lambda *a, **k: planned.append(a))
    result = make(deployment_plan, args).run(task_vars={"hostvars": {}, "groups": {}})
    assert result["failed"] and result["msg"].startswith(f"controller (localhost): vllm_omni.serve.deployment_plan: {needle}")
    assert planned == []


RENDER_HOST = {"ansible_host": "10.0.0.11", "vllm_omni_gpus": [0, 1, 2], "vllm_omni_audio_output": False}
RENDER_FLEET = {"hostvars": {"gpu-1": RENDER_HOST}, "groups": {"all": ["gpu-1"], "vllm_omni": ["gpu-1"]}}


def test_deployment_plan_with_a_render_dir_writes_the_render_and_hands_back_no_plan(make, tmp_path):
    """render.yml's one call: the files and their counts come back, the plan does not (neither fact nor value)."""
    dest = tmp_path / "render"
    first = make(deployment_plan, {"render_dir": str(dest)}).run(task_vars=RENDER_FLEET)
    assert not first.get("failed"), first.get("msg")
    assert "plan" not in first and set(first["ansible_facts"]) == {"vllm_omni_limit"}
    assert first["changed"] and first["render"]["files"] == len(first["render"]["added"]) > 3
    assert json.loads((dest / "plan.json").read_text())["hosts"]["gpu-1"]["pipelines"]
    again = make(deployment_plan, {"render_dir": str(dest)}).run(task_vars=RENDER_FLEET)
    assert not again["changed"] and again["render"]["added"] == again["render"]["modified"] == []
    # Check mode writes nothing; a directory that is not a render's is refused in one line, left as it was.
    checked = make(deployment_plan, {"render_dir": str(tmp_path / "new")}, check_mode=True).run(task_vars=RENDER_FLEET)
    assert checked["changed"] and not (tmp_path / "new").exists()
    foreign = tmp_path / "home"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    refused = make(deployment_plan, {"render_dir": str(foreign)}).run(task_vars=RENDER_FLEET)
    assert refused["failed"] and refused["msg"].startswith("controller (localhost): the render directory: ")
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]


@pytest.mark.parametrize("args, needle", [
    ({"plan": "hosts", "dest": "/tmp/r"}, "argument 'plan' is of type str"),
    ({"plan": {"hosts": {}}}, "missing required arguments: dest"),
    ({"plan": {"settings": {}}, "dest": "/tmp/r"}, "plan must be the output of the vllm_omni.serve.plan filter"),
    ({"plan": {"hosts": {}}, "dest": ""}, "dest is empty"),
])
def test_render_plan_refuses_bad_options(make, tmp_path, args, needle):
    with pytest.raises(AnsibleActionFail, match=needle):
        make(render_plan, args).run(task_vars={})
    assert list(tmp_path.iterdir()) == []


def test_report_files_refuses_bad_options_and_writes_good_ones(make, tmp_path):
    with pytest.raises(AnsibleActionFail, match="argument 'documents' is of type list"):
        make(report_files, {"dest": str(tmp_path / "r"), "documents": [{"a": 1}]}).run(task_vars={})
    assert not (tmp_path / "r").exists()
    result = make(report_files, {"dest": str(tmp_path / "r"), "documents": {"lab-1": {"ok": True}}}).run(task_vars={})
    assert result["files"] == [str(tmp_path / "r" / "lab-1.json")] and result["written"] is True
    assert json.loads((tmp_path / "r" / "lab-1.json").read_text()) == {"ok": True}
    checked = make(report_files, {"dest": str(tmp_path / "c"), "documents": {"lab-1": {}}}, check_mode=True)
    assert checked.run(task_vars={})["written"] is False and not (tmp_path / "c").exists()


@pytest.mark.parametrize("args, needle", [
    ({"required": True}, "missing required arguments: hosts"),
    ({"hosts": ["lab-1"], "required": "maybe"}, "argument 'required' is of type str"),
    ({"hosts": ["lab-1"], "plan": ["x"]}, "argument 'plan' is of type list"),
])
def test_secrets_check_refuses_bad_options_without_reading_a_secret(make, args, needle):
    class Unread(dict):
        def __getitem__(self, host):
            raise AssertionError(f"read {host}'s variables")
    result = make(secrets_check, args).run(task_vars={"hostvars": Unread()})
    assert result["failed"] and result["msg"].startswith(f"controller (localhost): vllm_omni.serve.secrets_check: {needle}")


def test_secrets_check_defaults_engine_hosts_to_hosts(make):
    hostvars = {"lab-1": {"vllm_omni_api_key": "k" * 40}, "lab-2": {}}
    result = make(secrets_check, {"hosts": "lab-1,lab-2", "required": "yes"}).run(task_vars={"hostvars": hostvars})
    assert result["failed"] and "lab-2" in result["msg"] and "k" * 40 not in json.dumps(result)
