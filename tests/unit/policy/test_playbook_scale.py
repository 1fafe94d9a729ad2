"""Scale defaults the playbooks carry themselves (docs/benchmarks.md, "Large fleets"), whatever ansible.cfg says."""

from __future__ import annotations

import yaml
from unitlib import REPO

PLAYBOOKS = REPO / "playbooks"
# Plays whose tasks read every host's result within the play (run_once over ansible_play_hosts, lockstep rounds).
LOCKSTEP = {
    ("preflight.yml", "Preflight | check every host before changing any"),
    ("artifacts.yml", "Artifacts | every host's missing wheel sets and model, from the host before it in the tree"),
    ("deploy.yml", "Roll | serving single-process pipelines that change, a bounded number at a time"),
    ("deploy.yml", "Roll | serving distributed pipelines that change, one at a time, on all their hosts together"),
}


def plays():
    for path in sorted(PLAYBOOKS.glob("*.yml")):
        for play in yaml.safe_load(path.read_text()) or []:
            if "hosts" in play:
                yield path.name, play


def test_no_play_gathers_facts_implicitly():
    gathering = [(name, play["name"]) for name, play in plays() if play.get("gather_facts") is not False]
    assert not gathering
    # docs/benchmarks.md counts them; the count follows the playbooks.
    count = len(list(plays()))
    assert f"all {count} plays say `gather_facts: false`" in (REPO / "docs" / "benchmarks.md").read_text()


def test_lockstep_plays_pin_the_linear_strategy():
    found = {(name, play["name"]): play.get("strategy") for name, play in plays()}
    assert set(found) >= LOCKSTEP, sorted(LOCKSTEP - set(found))
    assert {key: found[key] for key in LOCKSTEP} == dict.fromkeys(LOCKSTEP, "linear")
    assert set(found.values()) <= {None, "linear"}  # nothing asks for another strategy


def per_host_tasks(file: str, play_names: set[str] | None = None) -> list[str]:
    """The tasks of a playbook's plays that run once for each host (not run_once): each is a worker forked on the
    controller per host, and a module call on the host unless it is an action that stays on the controller."""
    found = []
    for name, play in plays():
        if name == file and (play_names is None or play["name"] in play_names):
            found += [task["name"] for task in play.get("tasks", []) if not task.get("run_once")]
    return found


def test_a_no_op_deploy_costs_a_few_tasks_a_host():
    # Until the no-op check skips every later play, a deploy runs plan.yml twice (before and after discovery),
    # facts.yml, the Limit play and converge.yml on every host; these are all it pays per host (benchmarks.md).
    limit = {play["name"] for name, play in plays() if name == "preflight.yml" and play["name"].startswith("Limit |")}
    # One module call: the OS and the GPUs.
    assert per_host_tasks("facts.yml") == ["Facts | the host's OS, and its GPUs, their memory, busy state and topology"]
    assert per_host_tasks("plan.yml") == []  # the planned-service groups: one task, run once
    assert per_host_tasks("preflight.yml", limit) == []
    assert per_host_tasks("converge.yml") == ["Converge | this host against what the last whole deploy left here"]


def test_tasks_read_the_plan_from_the_hosts_own_variable():
    # Reading hostvars['localhost'] makes Ansible copy and clean all of localhost's facts, the plan included
    # (23 MB at 1,024 hosts x 8 GPUs: about 1.4 s a read, benchmarks/plan_in_ansible.py). plan.yml's run_once plan
    # task registers it on every host and makes no fact of it; vars/plan.yml reads it there; nothing reads the fact.
    plan_vars = yaml.safe_load((PLAYBOOKS / "vars" / "plan.yml").read_text())
    # Inside a role, the role's part of it (filter role_plan); outside, the whole plan.
    assert plan_vars["vllm_omni_plan"] == ("{{ plan_result.plan | vllm_omni.serve.role_plan(ansible_role_name"
                                           " | default(''), inventory_hostname) }}")
    plan_task = yaml.safe_load((PLAYBOOKS / "plan.yml").read_text())[0]["tasks"][0]
    assert plan_task["vllm_omni.serve.deployment_plan"]["as_fact"] is False and plan_task["register"] == "plan_result"
    fact_reads = []
    for path in sorted([*PLAYBOOKS.rglob("*.yml"), *(REPO / "roles").rglob("*.yml")]):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            compact = line.replace(" ", "")
            if ("hostvars['localhost']['vllm_omni_plan']" in compact or "hostvars['localhost'].vllm_omni_plan" in compact
                    or "hostvars.localhost.vllm_omni_plan" in compact) and not line.lstrip().startswith("#"):
                fact_reads.append(f"{path.relative_to(REPO)}:{number}")
    assert not fact_reads
