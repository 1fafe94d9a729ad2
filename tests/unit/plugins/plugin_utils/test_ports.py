"""The port allocator on its own: what it assigns is what its checks read, slices never overlap, and the
plan's port list (firewall, reserved ports, preflight) is exactly the assigned ports."""

from __future__ import annotations

import dataclasses

import pytest

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._ports import (
    check_kv_slices,
    check_listen_ports,
    check_zmq_slices,
    engine_ranges,
    listen_ports,
    pipeline_ports,
    port_list,
    process_ports,
)
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._problems import Problems
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._setting_groups import PortSettings
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._validate import deployment_settings

CONNECTORS = ("mooncake", "nixl")


def settings(**values) -> PortSettings:
    """The allocator's settings as the planner reads them: defaults, with ``values`` set on the one host."""
    problems = Problems()
    found, _sources = deployment_settings(["h"], {"h": values}, problems)
    assert not problems.items, [p.line() for p in problems.items]
    return PortSettings.of(found)


def test_the_group_is_the_settings_table_s_values_and_names_its_variables():
    values = settings(vllm_omni_kv_connector="nixl", vllm_omni_stage_zmq_port_range=[30000, 30999])
    assert values.kv_connector == "nixl" and values.stage_zmq_port_range == (30000, 30999)
    assert PortSettings.setting("stage_zmq_port_range") == "vllm_omni_stage_zmq_port_range"
    with pytest.raises(AttributeError):  # frozen: the plan cannot change a setting behind the table's back
        values.api_port_base = 1


def assigned_ports(ports: dict) -> list[int]:
    """Every port number one process is assigned, ranges expanded."""
    numbers = []
    for value in ports.values():
        if isinstance(value, int):
            numbers.append(value)
        elif isinstance(value, dict):
            numbers.extend(value.values())
        else:
            numbers.extend(range(value[0], value[1] + 1))
    return numbers


def inside(port: int, ranges) -> bool:
    return any(first <= port <= last for _what, _setting, (first, last) in ranges)


@pytest.mark.parametrize("connector", CONNECTORS)
@pytest.mark.parametrize("count", [1, 2, 5, 8])
def test_every_port_assigned_to_a_hosts_processes_lies_in_the_ranges_its_checks_read(connector, count):
    values = settings(vllm_omni_kv_connector=connector)
    ranges = engine_ranges(count, values, distributed=True)
    for index in range(count):
        for ports in (pipeline_ports(values, index), process_ports(values, index, "prefill", head=True),
                      process_ports(values, index, "decode", head=False)):
            outside = [port for port in assigned_ports(ports) if not inside(port, ranges)]
            assert not outside, (index, ports, ranges)
    # The single-port ranges are exactly what the first and last process get: no check wider than the allocation.
    api = next(r for r in ranges if r[1] == "vllm_omni_api_port_base")[2]
    assert api == (values.api_port_base, values.api_port_base + count - 1)


@pytest.mark.parametrize("connector", CONNECTORS)
def test_slices_of_different_processes_never_overlap(connector):
    values = settings(vllm_omni_kv_connector=connector)
    key = "mooncake_rpc" if connector == "mooncake" else "ucx_tcp"
    for slice_key, ports in ((key, [pipeline_ports(values, i) for i in range(8)]),
                             ("zmq", [process_ports(values, i, "decode", head=False) for i in range(8)])):
        taken = [set(range(p[slice_key][0], p[slice_key][1] + 1)) for p in ports]
        assert all(len(s) == len(taken[0]) > 0 for s in taken), slice_key
        assert len(set().union(*taken)) == sum(len(s) for s in taken), f"{slice_key} slices overlap"


def test_headless_and_non_prefill_processes_take_only_their_own_ports():
    values = settings(vllm_omni_kv_connector="nixl")
    decode = process_ports(values, 3, "decode", head=False)
    assert "master" not in decode and "bootstrap" not in decode
    assert list(decode["nixl_side_channel"]) == ["decode"]
    mooncake = settings()
    assert "bootstrap" not in process_ports(mooncake, 0, "decode", head=True)
    assert process_ports(mooncake, 2, "prefill", head=True)["master"] == mooncake.stage_master_port_base + 2


def test_the_plans_port_list_is_the_assigned_ports_and_nothing_else():
    values = settings()
    pipelines = [{"name": f"omni{i}", "ports": pipeline_ports(values, i)} for i in range(3)]
    listed = listen_ports(pipelines, "pd")
    for pipeline in pipelines:
        mine = [r for r in listed if r["service"] == pipeline["name"]]
        expanded = sorted(port for r in mine for port in range(r["first"], r["last"] + 1))
        assert expanded == sorted(assigned_ports(pipeline["ports"])), pipeline["name"]
    assert check_listen_ports({"h": listed}, Problems())


def test_an_overlap_in_the_port_list_names_both_settings_and_what_to_move():
    listed = [{"service": "omni0", "purpose": "api", "first": 8091, "last": 8091},
              {"service": "router", "purpose": "api", "first": 8091, "last": 8091}]
    problems = Problems()
    assert not check_listen_ports({"h": listed}, problems)
    (problem,) = problems.items
    assert problem.where == "host h"
    assert problem.variable == "vllm_omni_api_port_base / vllm_omni_router_port"
    assert "omni0 api port 8091 and router api port 8091 overlap" in problem.problem
    assert problem.fix == "move vllm_omni_router_port so the ports do not overlap"


def test_the_reserved_ports_line_merges_touching_and_overlapping_ranges():
    ranges = [{"first": 8093, "last": 8093}, {"first": 8091, "last": 8092}, {"first": 16000, "last": 16063},
              {"first": 16010, "last": 16020}, {"first": 9000, "last": 9000}]
    assert port_list(ranges) == "8091-8093,9000,16000-16063"


@pytest.mark.parametrize("connector", CONNECTORS)
def test_too_many_pipelines_for_the_kv_range_is_refused_with_a_width_that_then_fits(connector):
    values = settings(vllm_omni_kv_connector=connector)
    range_name = "vllm_omni_mooncake_rpc_port_range" if connector == "mooncake" else "vllm_omni_nixl_ucx_port_range"
    low, high = getattr(values, range_name.removeprefix("vllm_omni_"))
    size = values.mooncake_rpc_ports_per_pipeline if connector == "mooncake" else values.nixl_ucx_ports_per_pipeline
    fits = (high - low + 1) // size
    assert check_kv_slices("h", fits, values, Problems())
    problems = Problems()
    assert not check_kv_slices("h", fits + 1, values, problems)
    (problem,) = problems.items
    assert problem.variable == range_name and f"this host runs {fits + 1} pipelines" in problem.problem
    wider = dataclasses.replace(values, **{range_name.removeprefix("vllm_omni_"): (low, low + (fits + 1) * size - 1)})
    assert f"[{low}, {low + (fits + 1) * size - 1}]" in problem.fix
    assert check_kv_slices("h", fits + 1, wider, Problems())


def test_a_slice_smaller_than_the_kv_workers_need_is_refused_for_every_host():
    values = settings(vllm_omni_tensor_parallel_size=2)
    problems = Problems()
    assert not check_kv_slices("h", 1, dataclasses.replace(values, mooncake_rpc_ports_per_pipeline=15), problems)
    assert problems.items[0].where == "all hosts (group_vars)" and "needs 16" in problems.items[0].problem


def test_too_many_distributed_processes_for_the_zmq_range_is_refused():
    values = settings()
    low, high = values.stage_zmq_port_range
    fits = (high - low + 1) // values.stage_zmq_ports_per_process
    assert check_zmq_slices("h", fits, values, Problems())
    problems = Problems()
    assert not check_zmq_slices("h", fits + 1, values, problems)
    assert problems.items[0].variable == "vllm_omni_stage_zmq_port_range"
