"""Each role's part of the plan (filter role_plan, playbooks/vars/plan.yml): the sections its argument_specs declare,
the host's own entries of the sections kept per host.

A role reads nothing it does not declare; the filters a role calls on its part answer as they do on the whole plan;
Ansible's own argument validation accepts every part; and a part does not grow with the fleet.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from unitlib import REPO, inventory

from ansible_collections.vllm_omni.serve.plugins.filter.artifacts_controller_rsyncd import artifacts_controller_rsyncd
from ansible_collections.vllm_omni.serve.plugins.filter.expected_pd import expected_pd
from ansible_collections.vllm_omni.serve.plugins.filter.frontdoor_tls import frontdoor_tls
from ansible_collections.vllm_omni.serve.plugins.filter.host_files import host_files
from ansible_collections.vllm_omni.serve.plugins.filter.install_set import install_set
from ansible_collections.vllm_omni.serve.plugins.filter.pipeline_files import pipeline_files
from ansible_collections.vllm_omni.serve.plugins.filter.preflight_report import preflight_report
from ansible_collections.vllm_omni.serve.plugins.filter.role_plan import role_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime import _role_plan

ROLES = sorted(path.parent.parent.name for path in (REPO / "roles").glob("*/meta/argument_specs.yml"))
SPECS = {role: yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
         for role in ROLES}
DECLARED = {role: _role_plan.declared_sections(specs) for role, specs in SPECS.items()}
GOLDEN = {path.parts[-3]: json.loads(path.read_text())
          for path in sorted((REPO / "tests" / "golden").glob("*/expected/plan.json"))}
# Services on (router host, master, Prometheus): the goldens have no monitoring host.
SERVICES = {"vllm_omni_monitoring_enabled": True, "vllm_omni_mooncake_master_enabled": True,
            "vllm_omni_monitoring_client_cidrs": ["10.0.0.0/24"]}
TWO_HOSTS = {"gpu-1": {"ansible_host": "10.0.0.11", "vllm_omni_gpus": list(range(6))},
             "gpu-2": {"ansible_host": "10.0.0.12", "vllm_omni_gpus": [0, 1, 2]}}
PLANS = {**GOLDEN, "services": build_plan(inventory(TWO_HOSTS, SERVICES, router=["edge-1"]))}
READ = re.compile(r"vllm_omni_plan(?:\.([a-z_]+)|\[['\"]([a-z_]+)['\"]\])")
# Every call that hands a role's vllm_omni_plan to a filter, as its input or as an argument.
GIVEN = re.compile(r"vllm_omni_plan \| vllm_omni\.serve\.(\w+)\(|vllm_omni\.serve\.(\w+)\([^()]*\bvllm_omni_plan\b")
GIB = 1024 ** 3
FACTS = {"systemd": True, "python_version": "3.11", "machine": "x86_64", "memlock_hard": "unlimited", "listening": [],
         "clock_synchronized": True, "rdma_devices": None, "nft": "/usr/sbin/nft", "packages": {},
         "disk": {"/opt/vllm-omni": {"checked": "/opt", "free_bytes": 500 * GIB},
                  "/var/lib/vllm-omni/hf": {"checked": "/var", "free_bytes": 500 * GIB}}}


def _own_pipelines(plan: dict, host: str) -> list[dict]:
    return plan["hosts"].get(host, {}).get("pipelines", [])


# How each such filter is called for a host, from the role's part or from the whole plan (the same arguments).
CALLS = {
    "install_set": lambda plan, host: [install_set(plan, host, [component]) for component in
                                       ("engine", "router", "frontdoor", "firewall", "monitoring", "mooncake_master")],
    "host_files": lambda plan, host: [host_files(plan, host, [component]) for component in
                                      ("artifacts", "mooncake", "mooncake_master")],
    "frontdoor_tls": lambda plan, host: frontdoor_tls(plan, host) if host in plan["router"]["per_host"] else None,
    "preflight_report": lambda plan, host: preflight_report(plan, host, FACTS, None),
    "expected_pd": lambda plan, host: [expected_pd(pipeline, plan) for pipeline in _own_pipelines(plan, host)],
    "pipeline_files": lambda plan, host: [pipeline_files(pipeline, plan) for pipeline in _own_pipelines(plan, host)],
    "artifacts_controller_rsyncd": lambda plan, host: artifacts_controller_rsyncd(
        plan, {item["id"]: f"/cache/{item['id']}" for item in plan["artifacts"]["items"]}, "/cache/rsyncd.log"),
}


def role_files(role: str):
    return [path for path in sorted((REPO / "roles" / role).rglob("*")) if path.is_file() and path.suffix in (".yml", ".j2")
            and "meta" not in path.parts]


def hosts_of(plan: dict) -> list[str]:
    return sorted(plan["footprint"])


def test_every_role_that_reads_the_plan_declares_its_sections():
    readers = {role for role in ROLES if any(READ.search(path.read_text()) for path in role_files(role))}
    assert readers and readers <= {role for role in ROLES if DECLARED[role]}
    assert DECLARED["python_venv"] == ()  # reads no plan: its callers pass what it needs


@pytest.mark.parametrize("role", ROLES)
def test_a_role_reads_only_the_sections_it_declares(role):
    read = {name for path in role_files(role) for match in READ.finditer(path.read_text())
            for name in match.groups() if name}
    assert read <= set(DECLARED[role]), f"roles/{role} reads {sorted(read - set(DECLARED[role]))} without declaring them"


INCLUDES = ("ansible.builtin.include_role", "ansible.builtin.import_role")
TASK_FILES = ("ansible.builtin.import_tasks", "ansible.builtin.include_tasks")


DYNAMIC = ("ansible.builtin.include_role", "ansible.builtin.include_tasks")


def _own_templates(task: dict) -> list:
    """What a task or block hands the tasks below it: its variables, and its conditions unless it is a dynamic
    include (Ansible extends the `when` of a block's or an import's tasks with it; an include's is its own)."""
    dynamic = any(key in task for key in DYNAMIC)
    return [task.get("vars") or {}, [] if dynamic else task.get("when") or []]


def _handed_to_roles(tasks, directory, inherited: list) -> list[tuple[str, list]]:
    """(role, templates) for every include_role/import_role among ``tasks``: the templates its tasks inherit from
    the include and every block and imported or included task file above it (followed within ``directory``)."""
    found = []
    for task in tasks or []:
        if not isinstance(task, dict):
            continue
        here = inherited + _own_templates(task)
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks"):
            found += _handed_to_roles(task.get(key), directory, here)
        included = next((task[key] for key in INCLUDES if key in task), None)
        if included:
            found.append((str(included["name"]).removeprefix("vllm_omni.serve."), [*here, included.get("apply") or {}]))
        task_file = next((task[key] for key in TASK_FILES if key in task), None)
        if isinstance(task_file, str) and "{{" not in task_file and (directory / task_file).is_file():
            found += _handed_to_roles(yaml.safe_load((directory / task_file).read_text()), directory, here)
    return found


def test_the_scan_follows_blocks_and_imported_task_files(tmp_path):
    inner = [{"ansible.builtin.include_role": {"name": "vllm_omni.serve.x"}, "vars": {"a": "{{ vllm_omni_plan.hosts }}"}}]
    (tmp_path / "inner.yml").write_text(yaml.safe_dump(inner))
    outer = [{"block": [{"ansible.builtin.import_tasks": "inner.yml", "when": "vllm_omni_plan.os_packages"}],
              "vars": {"b": "{{ vllm_omni_plan.router }}"}}]
    [(role, templates)] = _handed_to_roles(outer, tmp_path, [])
    read = {name for match in READ.finditer(json.dumps(templates)) for name in match.groups() if name}
    assert role == "x" and read == {"hosts", "os_packages", "router"}


def test_what_a_caller_hands_a_role_reads_only_the_sections_that_role_declares():
    # Ansible templates what the tasks of an included role inherit (the include's variables and conditions, and
    # those of every block and imported task file above it) when those tasks run, where vllm_omni_plan is the
    # included role's part: a caller's template over the plan is read against the callee's sections.
    handed = 0
    entry_files = [*(REPO / "roles").glob("*/tasks/*.yml"), *(REPO / "playbooks").glob("*.yml")]
    for path in sorted(entry_files):
        for role, templates in _handed_to_roles(yaml.safe_load(path.read_text()), path.parent, []):
            if role not in DECLARED or not DECLARED[role]:
                continue  # not ours, or it declares no section: it is handed the whole plan
            read = {name for match in READ.finditer(json.dumps(templates)) for name in match.groups() if name}
            assert read <= set(DECLARED[role]), (f"{path.relative_to(REPO)} hands roles/{role} a template over "
                                                 f"{sorted(read - set(DECLARED[role]))}: hand it a value (set_fact)")
            handed += 1
    assert handed > 20


@pytest.mark.parametrize("role", ROLES)
def test_every_declared_section_is_a_plan_section_of_its_type(role):
    schema = yaml.safe_load((REPO / "data" / "plan_schema.yml").read_text())["sections"]
    for entry in SPECS[role].values():
        plan_option = (entry.get("options") or {}).get("vllm_omni_plan")
        if plan_option:
            for name, option in plan_option["options"].items():
                spelled = schema[name].get("type", "dict")
                assert option == {"type": spelled}, f"roles/{role}: {name} is {spelled} in data/plan_schema.yml"


def _given(role: str) -> set[str]:
    """The filters ``role``'s files hand its vllm_omni_plan to."""
    return {name for path in role_files(role) for match in GIVEN.finditer(path.read_text()) for name in match.groups()
            if name}


def test_every_filter_a_role_hands_its_part_to_is_compared():
    given = {name for role in ROLES for name in _given(role)}
    assert given == set(CALLS), "add the filter's call to CALLS: its answer from a role's part must be the whole plan's"


@pytest.mark.parametrize("role", [role for role in ROLES if _given(role)])
def test_the_filters_a_role_calls_answer_the_same_from_its_part(role):
    compared = 0
    for plan in PLANS.values():
        for host in hosts_of(plan):
            part = role_plan(plan, f"vllm_omni.serve.{role}", host)
            for name in sorted(_given(role)):
                assert CALLS[name](part, host) == CALLS[name](plan, host), (role, name, host)
                compared += 1
    assert compared > 20


@pytest.mark.parametrize("role", [role for role in ROLES if DECLARED[role]])
def test_ansible_accepts_every_part_a_role_is_given(role):
    for plan in PLANS.values():
        for host in [*hosts_of(plan), "localhost"]:
            part = role_plan(plan, f"vllm_omni.serve.{role}", host)
            assert set(part) <= set(DECLARED[role])
            for entry, spec in SPECS[role].items():
                options = spec.get("options") or {}
                if "vllm_omni_plan" not in options:
                    continue
                result = ArgumentSpecValidator({"vllm_omni_plan": options["vllm_omni_plan"]}).validate(
                    {"vllm_omni_plan": part})
                assert result.error_messages == [], (role, entry, host)


def test_a_section_the_role_does_not_declare_is_refused_by_ansible():
    spec = SPECS["upgrade"]["main"]["options"]["vllm_omni_plan"]
    plan = PLANS["pd-2hosts"]
    part = {**role_plan(plan, "vllm_omni.serve.upgrade", "gpu-1"), "footprint": plan["footprint"]}
    messages = ArgumentSpecValidator({"vllm_omni_plan": spec}).validate({"vllm_omni_plan": part}).error_messages
    assert any("footprint" in message for message in messages)


def test_a_part_keeps_the_hosts_own_entries():
    plan = PLANS["services"]
    part = role_plan(plan, "vllm_omni.serve.engine", "gpu-1")
    assert set(part) == set(DECLARED["engine"]) & set(plan)
    assert list(part["hosts"]) == ["gpu-1"] and list(part["footprint"]) == ["gpu-1"]
    assert list(part["firewall"]["per_host"]) == ["gpu-1"] and part["firewall"]["peers"] == plan["firewall"]["peers"]
    assert list(part["self_heal"]["per_host"]) == ["gpu-1"]
    assert part["router"] is plan["router"] and part["artifacts"] is plan["artifacts"]  # the deployment's, whole
    assert "os_packages" not in part and "answer_check" in part


def test_the_controller_and_the_monitoring_host_keep_every_host():
    plan = PLANS["services"]
    monitoring_host = next(iter(plan["monitoring"]["per_host"]))
    for host in ("localhost", None, monitoring_host):
        part = role_plan(plan, "vllm_omni.serve.engine", host)
        assert part["hosts"] is plan["hosts"] and part["footprint"] is plan["footprint"]


def test_a_host_of_a_spanning_pipeline_keeps_its_peers():
    plan = PLANS["pd-span-2hosts"]
    assert plan["distributed_pipelines"]
    assert sorted(role_plan(plan, "vllm_omni.serve.engine", "gpu-1")["hosts"]) == ["gpu-1", "gpu-2"]
    lone = PLANS["pd-2hosts"]
    assert sorted(role_plan(lone, "vllm_omni.serve.engine", "gpu-1")["hosts"]) == ["gpu-1"]


def test_outside_the_collections_roles_the_plan_is_whole():
    plan = PLANS["pd-2hosts"]
    for role in ("", "my.own.engine", "engine", "vllm_omni.serve.python_venv"):
        assert role_plan(plan, role, "gpu-1") == plan


def test_a_roles_part_does_not_grow_with_the_fleet():
    def engine_part_bytes(count: int) -> tuple[int, int]:
        hosts = {f"gpu-{i}": {"ansible_host": f"10.0.0.{10 + i}", "vllm_omni_gpus": [0, 1, 2]} for i in range(count)}
        plan = build_plan(inventory(hosts))
        return len(json.dumps(role_plan(plan, "vllm_omni.serve.engine", "gpu-0"))), len(json.dumps(plan))

    small_part, small_plan = engine_part_bytes(4)
    large_part, large_plan = engine_part_bytes(64)
    assert large_plan > 10 * small_plan
    # What still grows: the router's worker list and the artifacts' per-host tree (a few hundred bytes a host).
    assert large_part < 2 * small_part, (small_part, large_part)
