"""Properties of every plan, over generated inventories (hypothesis)."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._problems import PlanError
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._settings import COMPUTED_FACTS, SETTINGS

gpu_sets = st.lists(st.integers(min_value=0, max_value=15), min_size=1, max_size=16, unique=True)
layouts = st.sampled_from([("0.26.0", "pd"), ("0.26.0", "aggregated"), ("0.30.0", "aggregated")])


@st.composite
def inventories(draw):
    count = draw(st.integers(min_value=1, max_value=4))
    version, layout = draw(layouts)
    group_vars = {
        "vllm_omni_version": version,
        "vllm_omni_layout": layout,
        "vllm_omni_tensor_parallel_size": draw(st.sampled_from([1, 2, 4])),
        "vllm_omni_api_port_base": draw(st.integers(min_value=2000, max_value=2100)),
        "vllm_omni_bootstrap_port_base": draw(st.integers(min_value=3000, max_value=3100)),
    }
    hosts = {f"h{i}": {"ansible_host": f"10.1.0.{i + 1}", "vllm_omni_gpus": draw(gpu_sets)} for i in range(count)}
    hostvars = {name: {**group_vars, **host_vars} for name, host_vars in hosts.items()}
    return {"engine_hosts": list(hosts), "router_hosts": [], "hostvars": hostvars}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inventories())
def test_every_plan_keeps_its_invariants(inv):
    any_group_vars = next(iter(inv["hostvars"].values()))
    tp = any_group_vars["vllm_omni_tensor_parallel_size"]
    layout = any_group_vars["vllm_omni_layout"]
    per_pipeline = 2 * tp + 1 if layout == "pd" else tp + 1
    assume(all(len(v["vllm_omni_gpus"]) >= per_pipeline for v in inv["hostvars"].values()))
    plan = build_plan(inv)
    for host, host_plan in plan["hosts"].items():
        listed = inv["hostvars"][host]["vllm_omni_gpus"]
        pipelines = host_plan["pipelines"]
        # pipelines per host = floor(gpus / gpus per pipeline)
        assert len(pipelines) == len(listed) // per_pipeline
        used = [g for p in pipelines for g in p["gpus"]]
        # no GPU used twice, only listed GPUs used, the rest reported
        assert len(used) == len(set(used))
        assert set(used) | set(host_plan["unused_gpus"]) == set(listed)
        assert not set(used) & set(host_plan["unused_gpus"])
        # ports unique per host
        ports = [port for r in host_plan["listen_ports"] for port in range(r["first"], r["last"] + 1)]
        assert len(ports) == len(set(ports))
        for pipeline in pipelines:
            visible = [int(g) for g in pipeline["environment"]["CUDA_VISIBLE_DEVICES"].split(",")]
            assert visible == pipeline["gpus"]
            for stage in pipeline["stages"]:
                logical = [int(d) for d in stage["devices"].split(",")]
                # every stage device inside its pipeline's visible set
                assert all(0 <= d < len(visible) for d in logical)
                assert [visible[d] for d in logical] == stage["physical_gpus"]
                assert len(logical) == stage["tensor_parallel_size"]
            sizes = {s["role"]: s["tensor_parallel_size"] for s in pipeline["stages"]}
            if layout == "pd":
                # P/D TP equal, and the rendered document agrees
                assert sizes["prefill"] == sizes["decode"] == tp
                args = [s["engine_args"] for s in pipeline["stage_config"]["stage_args"][:2]]
                assert args[0]["tensor_parallel_size"] == args[1]["tensor_parallel_size"] == tp


junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)
setting_names = st.sampled_from([
    "vllm_omni_gpus", "vllm_omni_ip", "vllm_omni_version", "vllm_omni_layout", "vllm_omni_tensor_parallel_size",
    "vllm_omni_api_port_base", "vllm_omni_mooncake_rpc_port_range", "vllm_omni_stage_engine_args",
    "vllm_omni_stage_sampling_params", "vllm_omni_extra_env", "vllm_omni_pipelines_per_host", "ansible_host",
    "vllm_omni_model", "vllm_omni_mooncake_rdma_devices", "vllm_omni_install_root",
])


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(setting_names, junk, max_size=5))
def test_any_input_gives_a_plan_or_a_plan_error_never_a_traceback(garbage):
    host_vars = {"ansible_host": "10.0.0.1", "vllm_omni_gpus": [0, 1, 2], **garbage}
    try:
        build_plan({"engine_hosts": ["h"], "router_hosts": [], "hostvars": {"h": host_vars}})
    except PlanError as error:
        assert error.problems and all(p.problem for p in error.problems)


# Every input type a setting can be given, very large values included: what YAML and -e can produce.
any_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(min_value=10**18, max_value=10**40)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12) | st.text(min_size=2000, max_size=5000),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=6,
)
# What an exception's own text looks like: a problem must never read like this.
EXCEPTION_TEXT = re.compile(r"object has no attribute|not subscriptable|unhashable type|object is not|NoneType|"
                            r"Traceback|invalid literal for|unsupported operand|takes \d+ positional")
# Every name the planner reads from an inventory: each setting of the table a plan holds, and discovery's facts.
PLANNED = sorted(s.name for s in SETTINGS if s.scope in ("host", "deployment")) + sorted(COMPUTED_FACTS - {"vllm_omni_plan"})


@pytest.mark.parametrize("name", PLANNED)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=any_value)
def test_every_setting_of_the_table_takes_any_value_with_a_problem_never_exception_text(name, value):
    host_vars = {"ansible_host": "10.0.0.1", "vllm_omni_gpus": [0, 1, 2], name: value}
    try:
        build_plan({"engine_hosts": ["h"], "router_hosts": ["h"], "hostvars": {"h": host_vars}})
    except PlanError as error:
        assert error.problems
        for problem in error.problems:
            assert problem.problem and problem.fix is not None, problem
            text = f"{problem.where} {problem.variable} {problem.problem} {problem.fix}"
            assert not EXCEPTION_TEXT.search(text), text
            assert len(text) < 3000, f"{name}: a problem of {len(text)} characters (a value shown whole?)"
