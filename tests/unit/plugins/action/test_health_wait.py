"""health_wait's action: the loop around the module's one look (bad input refused before any look,
retries until the timeout, an unreachable host ends the wait, the failure carries the journal)."""

from __future__ import annotations

import types

import pytest
from ansible.plugins.action import ActionBase

from ansible_collections.vllm_omni.serve.plugins.action import health_wait

TARGET = {"name": "omni0", "unit": "vllm-omni@omni0.service", "health_url": "http://127.0.0.1:8091/health"}


class Clock:
    """time.monotonic and time.sleep for the action: sleeping moves the clock, nothing waits."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class Task:
    def __init__(self, args):
        self.args = args


class PlayContext:
    remote_addr = "10.0.0.1"


def seen(healthy, journal=()):
    return {"targets": [{**TARGET, "url": TARGET["health_url"], "healthy": healthy,
                         "problem": "" if healthy else "connection refused", "journal": list(journal)}]}


@pytest.fixture
def action(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(health_wait.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(health_wait.time, "sleep", clock.sleep)
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    shown = []
    monkeypatch.setattr(health_wait.display, "display", shown.append)

    def make(args, answers):
        module = object.__new__(health_wait.ActionModule)
        module._task, module._play_context = Task(args), PlayContext()
        module._load_name = "vllm_omni.serve.health_wait"
        looks = []

        def look(module_args, journal_lines, task_vars):
            looks.append(journal_lines)
            return answers[min(len(looks), len(answers)) - 1]

        module._look = look
        return types.SimpleNamespace(module=module, looks=looks, shown=shown, clock=clock)
    return make


def test_healthy_after_retries_reports_the_wait(action):
    run = action({"targets": [TARGET], "delay": 5, "progress_interval": 10},
                 [seen(False, ["Loading weights took 1.0 seconds"])] * 10 + [seen(True)])
    result = run.module.run(task_vars={"inventory_hostname": "lab-1"})
    assert not result.get("failed") and result["changed"] is False
    # Looks 1 s apart for the first 5 s, then a quarter of the time waited (1.25, 1.56, 1.95, 2.44, 3.05 s),
    # never more than the delay: 10 failed looks are 15.3 s, where a fixed 5 s delay made them 50 s.
    assert result["waited"] == 15.3 and len(run.looks) == 11
    assert run.shown and all(line.startswith("lab-1") and "omni0" in line for line in run.shown)


@pytest.mark.parametrize("args, needle", [
    ({"targets": [TARGET], "timeout": "half an hour"}, "argument 'timeout' is of type str and we were unable to convert to int"),
    ({"targets": [TARGET], "journal_lines": [40]}, "argument 'journal_lines' is of type list"),
    ({"targets": [TARGET], "path": "/health"}, "unsupported option: path. Supported parameters"),  # URLs are whole now
    ({"timeout": 60}, "missing required arguments: targets"),
    ({"targets": [{"name": "omni0", "unit": "u", "url": "http://x"}]}, "targets 0 lack a name, unit or health_url"),
    ({"targets": "omni0"}, "'targets' is of type"),
])
def test_bad_input_fails_at_once_without_a_look(action, args, needle):
    run = action(args, [seen(True)])
    result = run.module.run(task_vars={"inventory_hostname": "lab-1"})
    assert result["failed"] and needle in result["msg"] and result["msg"].startswith("lab-1: ")
    assert run.looks == []


def test_unreachable_host_ends_the_wait(action):
    gone = {"unreachable": True, "msg": "ssh: connect to host lab-2 port 22: No route to host"}
    run = action({"targets": [TARGET], "timeout": 600}, [seen(False), gone])
    result = run.module.run(task_vars={"inventory_hostname": "lab-2"})
    assert result["unreachable"] and len(run.looks) == 2 and run.clock.now < 600


def test_a_failed_look_is_retried_until_the_timeout(action):
    broken = {"failed": True, "msg": "MODULE FAILURE: /usr/bin/python3: not found"}
    recovers = action({"targets": [TARGET], "timeout": 30, "delay": 5}, [broken, broken, seen(True)])
    assert recovers.module.run(task_vars={"inventory_hostname": "lab-1"})["changed"] is False
    assert len(recovers.looks) == 3
    stays = action({"targets": [TARGET], "timeout": 30, "delay": 5}, [broken])
    result = stays.module.run(task_vars={"inventory_hostname": "lab-1"})
    assert result["failed"] and "MODULE FAILURE" in result["msg"] and stays.clock.now >= 30


def test_timeout_fails_with_the_unit_url_and_journal(action):
    journal = ["Starting to load model /srv/models/qwen3-omni", "CUDA out of memory"]
    run = action({"targets": [TARGET], "timeout": 20, "delay": 5, "journal_lines": 7}, [seen(False, journal)])
    result = run.module.run(task_vars={"inventory_hostname": "lab-1"})
    assert result["failed"] and run.clock.now >= 20
    assert run.looks[-1] == 7 and all(lines == health_wait.PROGRESS_JOURNAL_LINES for lines in run.looks[:-1])
    for needle in ("lab-1/omni0 (vllm-omni@omni0.service)", "http://127.0.0.1:8091/health", "within 20s",
                   "CUDA out of memory"):
        assert needle in result["msg"]


MOONCAKE_HANG = ["(StageEngineCoreProc_stage1_replica0 pid=948) INFO 12-06 10:00:01 "
                 "[mooncake_connector.py:210] Initializing Mooncake Transfer Engine worker, bootstrap 10.0.0.2:9101"]


def test_a_start_stuck_in_one_phase_fails_within_the_stall_bound_naming_stage_and_phase(action):
    run = action({"targets": [TARGET], "timeout": 1800, "delay": 5, "stall_timeout": 120},
                 [seen(False, ["Starting to load model /srv/models/qwen3-omni"]), seen(False, MOONCAKE_HANG)])
    result = run.module.run(task_vars={"inventory_hostname": "lab-1"})
    assert result["failed"] and 120 <= run.clock.now <= 126, run.clock.now
    for needle in ("lab-1/omni0 (vllm-omni@omni0.service) made no progress for 12", "bound 120 s, "
                   "vllm_omni_start_stall_timeout", "stuck at: stage 1: setting up the KV transfer (Mooncake)",
                   "bootstrap 10.0.0.2:9101", "connection refused", "journalctl -u vllm-omni@omni0.service",
                   "raise vllm_omni_start_stall_timeout"):
        assert needle in result["msg"], result["msg"]


def test_a_slow_start_that_keeps_making_progress_is_not_a_stall(action):
    # Weights load for 300 s at 1 % per 3 s, then the engine serves: each new percentage is progress.
    loading = [seen(False, [f"Loading safetensors checkpoint shards: {p}% Completed | {p}/100"]) for p in range(100)]
    run = action({"targets": [TARGET], "timeout": 1800, "delay": 3, "stall_timeout": 60}, [*loading, seen(True)])
    result = run.module.run(task_vars={"inventory_hostname": "lab-1"})
    assert not result.get("failed"), result.get("msg")
    # Before vLLM's first milestone, a new newest line is progress; the same line for the bound is not.
    quiet = ["Resolved architecture: Qwen3OmniMoeForConditionalGeneration"]
    run = action({"targets": [TARGET], "timeout": 1800, "delay": 5, "stall_timeout": 60},
                 [*(seen(False, [f"import step {i}"]) for i in range(10)), seen(False, quiet)])
    result = run.module.run(task_vars={"inventory_hostname": "lab-1"})
    assert result["failed"] and "stuck at: before vLLM's first start-up milestone" in result["msg"]
    assert "Resolved architecture" in result["msg"]


def test_without_a_stall_bound_only_the_timeout_ends_the_wait(action):
    run = action({"targets": [TARGET], "timeout": 300, "delay": 5}, [seen(False, MOONCAKE_HANG)])
    result = run.module.run(task_vars={"inventory_hostname": "lab-1"})
    assert result["failed"] and run.clock.now >= 300 and "within 300s" in result["msg"]
