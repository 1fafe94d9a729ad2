"""The plan as a declared interface (data/plan_schema.yml): every golden plan and the planner's other shapes hold to
it, the checker finds what does not, and a change to a declared key bumps the schema version.

A breaking change is a declared key removed, or its type or its optional mark changed: whatever reads the plan
(roles, playbooks, plugins, an operator's own tooling over plan.json) may rely on it. Such a change raises
``version`` here and PLAN_SCHEMA with it, and adds tests/fixtures/plan-schema/v<version>.json, the snapshot that
version is then held to. Adding a key or a section changes no version.
"""

from __future__ import annotations

import json

import pytest
import yaml
from unitlib import REPO, inventory

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import PLAN_SCHEMA, build_plan

SCHEMA = yaml.safe_load((REPO / "data" / "plan_schema.yml").read_text())
TYPES = {"dict": dict, "list": list, "str": str, "int": int, "float": float, "bool": bool, "null": type(None)}
GOLDEN_PLANS = sorted((REPO / "tests" / "golden").glob("*/expected/plan.json"))
HOSTS = {"gpu-1": {"ansible_host": "10.0.0.11", "vllm_omni_gpus": list(range(6))},
         "gpu-2": {"ansible_host": "10.0.0.12", "vllm_omni_gpus": [0, 1, 2]}}
# The shapes the goldens do not show: services on, the simulator without a front door, aggregated without self-heal.
SHAPES = {
    "services": {"vllm_omni_monitoring_enabled": True, "vllm_omni_mooncake_master_enabled": True,
                 "vllm_omni_monitoring_client_cidrs": ["10.0.0.0/24"]},
    "simulator": {"vllm_omni_engine_backend": "simulator", "vllm_omni_frontdoor_enabled": False},
    "aggregated": {"vllm_omni_layout": "aggregated", "vllm_omni_self_heal": False,
                   "vllm_omni_artifact_controller_address": "10.0.0.1"},
}


def _type_ok(value, spelled: str) -> bool:
    return isinstance(value, tuple(TYPES[name] for name in spelled.rstrip("?").split("|"))) and not (
        isinstance(value, bool) and "bool" not in spelled)


def problems(plan: dict, schema: dict = SCHEMA) -> list[str]:
    """What in ``plan`` the schema does not declare, or declares otherwise: one line each."""
    sections = schema["sections"]
    found = [f"{name}: not declared" for name in sorted(set(plan) - set(sections))]
    found += [f"{name}: missing" for name in sorted(set(sections) - set(plan))]
    for name, spec in sorted(sections.items()):
        if name not in plan:
            continue
        value = plan[name]
        if "type" in spec:
            found += [] if _type_ok(value, spec["type"]) else [f"{name}: {type(value).__name__}, not {spec['type']}"]
        elif "map_of" in spec:
            if not isinstance(value, dict):
                found.append(f"{name}: a map of {spec['map_of']} expected")
                continue
            found += [f"{name}[{key}]: {type(item).__name__}, not {spec['values']}"
                      for key, item in value.items() if not _type_ok(item, spec["values"])]
        else:
            keys = spec["keys"]
            found += [f"{name}.{key}: not declared" for key in sorted(set(value) - set(keys))]
            found += [f"{name}.{key}: missing" for key, spelled in sorted(keys.items())
                      if key not in value and not spelled.endswith("?")]
            found += [f"{name}.{key}: {type(value[key]).__name__}, not {spelled}" for key, spelled in sorted(keys.items())
                      if key in value and not _type_ok(value[key], spelled)]
    return found


def test_the_schema_version_is_the_planners():
    assert SCHEMA["version"] == PLAN_SCHEMA
    assert all(spec.get("description") for spec in SCHEMA["sections"].values())


@pytest.mark.parametrize("path", GOLDEN_PLANS, ids=lambda path: path.parts[-3])
def test_every_golden_plan_holds_to_the_schema(path):
    plan = json.loads(path.read_text())
    assert plan["schema"] == PLAN_SCHEMA and problems(plan) == []


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_planners_other_shapes_hold_to_the_schema(shape):
    plan = build_plan(inventory(HOSTS, SHAPES[shape], router=["edge-1"]))
    assert problems(plan) == []


def test_the_checker_finds_an_undeclared_a_missing_and_a_mistyped_key():
    plan = json.loads(GOLDEN_PLANS[0].read_text())
    plan["surprise"] = 1
    plan["rolling"] = {"max_unavailable": "2", "extra": True}
    del plan["paths"]["unit_dir"]
    plan["host_platforms"] = {"gpu-1": 12}
    assert problems(plan) == ["surprise: not declared", "host_platforms[gpu-1]: int, not str",
                              "paths.unit_dir: missing", "rolling.extra: not declared",
                              "rolling.max_unavailable: str, not int"]


def test_a_declared_key_changes_only_with_a_new_schema_version():
    """The snapshot of this version: each of its sections and keys is still declared, with the same type and mark."""
    snapshot_file = REPO / "tests" / "fixtures" / "plan-schema" / f"v{SCHEMA['version']}.json"
    assert snapshot_file.is_file(), f"a new schema version needs its snapshot: {snapshot_file.relative_to(REPO)}"
    snapshot = json.loads(snapshot_file.read_text())["sections"]
    declared = SCHEMA["sections"]
    changed = [f"{name}: removed" for name in snapshot if name not in declared]
    for name, spec in snapshot.items():
        now = declared.get(name, {})
        for field in ("type", "map_of", "values"):
            if field in spec and now.get(field) != spec[field]:
                changed.append(f"{name}: {field} {spec[field]} -> {now.get(field)}")
        changed += [f"{name}.{key}: {spelled} -> {now.get('keys', {}).get(key, 'removed')}"
                    for key, spelled in spec.get("keys", {}).items() if now.get("keys", {}).get(key) != spelled]
    assert changed == [], ("breaking changes to the plan's declared interface: bump version in data/plan_schema.yml "
                           f"and PLAN_SCHEMA, and add the new version's snapshot: {changed}")


def test_the_guard_sees_a_removed_key_and_a_changed_type(monkeypatch):
    weakened = json.loads(json.dumps(SCHEMA))
    del weakened["sections"]["paths"]["keys"]["unit_dir"]
    weakened["sections"]["layout"]["type"] = "str|null"
    monkeypatch.setitem(SCHEMA, "sections", weakened["sections"])
    with pytest.raises(AssertionError, match=r"layout: type str -> str\|null.*paths.unit_dir: str -> removed"):
        test_a_declared_key_changes_only_with_a_new_schema_version()
